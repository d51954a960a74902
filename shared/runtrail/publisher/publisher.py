"""The agent-side publisher: validated, redacted, sequenced events to Kafka, never raising.

An agent runtime attaches a :class:`Publisher` as a listener (``on_event``) or calls
:meth:`Publisher.publish`. Each event is checked against the limits, redacted, validated,
numbered within its (tenant, run), encoded and produced keyed by run ID. Nothing here raises
into the agent (design principle 3): invalid events are rejected (counted, logged, ``None``
returned).

Every accepted event is also appended to a write-ahead spool (:mod:`runtrail.publisher.wal`)
by a committer thread, one write and one fsync per ``spool_commit_ms`` (group commit), so an
agent that dies loses at most the events of that last interval; the next publisher on the same
spool folder sends the rest.

Delivery modes:

* **direct** — events are produced straight to Kafka as they are accepted;
* **draining** — entered on the first failed delivery, when no acknowledgement arrives for
  ``delivery_timeout_ms``, when the local queue stays full, or when a non-empty spool is found
  at start. At that moment everything still queued or in flight in librdkafka is purged (so no
  later event of a run can overtake an earlier one), later events are only written to the
  spool, and a background thread resends the spool in order, in chunks, from the first event
  not acknowledged. It returns to direct mode only once every accepted event is acknowledged.

A broker's "message too large" is final only for an event sent alone. A topic whose
``max.message.bytes`` is below the publisher's limit refuses a whole produce batch, and every
event in it gets the error; each is resent from the spool in a chunk of its own, and only one
refused again is rejected (counted ``rejected``, logged).

Exactly once on the topic: events whose fate is unknown (purged while in flight, or found
beyond the cursor at start) are looked up on the topic by eventId before they are resent
(:mod:`runtrail.publisher.recovery`), so a resend never doubles what the broker already
holds. Consumers still drop same-eventId duplicates, for the one case left: a request the
broker received before the outage but wrote only after that check.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer

from runtrail.config import Settings
from runtrail.events import (
    Actor,
    Event,
    EventCodec,
    EventData,
    EventError,
)
from runtrail.events.limits import EventLimits
from runtrail.kafka.auth import describe, is_auth_failure, naming_options
from runtrail.kafka.client_log import client_logger
from runtrail.kafka.durability import CHECK_TIMEOUT_S, start_durability_check
from runtrail.kafka.producer_config import SIZE_ERRORS, producer_config, too_large
from runtrail.kafka.retry import Backoff
from runtrail.kafka.unacked import SizeSuspects
from runtrail.privacy.protect import (
    Durable,
    ProtectFailed,
    Protector,
    protector_from_settings,
)
from runtrail.publisher.inflight import InFlight
from runtrail.publisher.ledger import Ledger
from runtrail.publisher.metrics import PublisherMetrics, PublisherStats
from runtrail.publisher.pipeline import Rejected, Validated, encode, envelope, prepare, validate
from runtrail.publisher.recovery import already_on_topic
from runtrail.publisher.redaction import Redactor, default_redactor
from runtrail.publisher.sequencing import SequenceCounter
from runtrail.publisher.spool_record import SpoolRecord
from runtrail.publisher.wal import Wal, WalEntry

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

#: Broker verdicts that no resend can change: spooling such an event would block the spool.
PERMANENT_ERRORS: frozenset[int] = SIZE_ERRORS | {
    KafkaError.INVALID_RECORD,
    KafkaError._INVALID_ARG,
}
#: What a purge reports for the events it took back (they are resent from the spool).
_PURGED: frozenset[int] = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


class ProducerLike(Protocol):
    """The part of ``confluent_kafka.Producer`` the publisher uses (tests pass fakes)."""

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None: ...
    def poll(self, timeout: float = ...) -> int: ...
    def flush(self, timeout: float = ...) -> int: ...
    def purge(self, in_queue: bool = ..., in_flight: bool = ..., blocking: bool = ...) -> None: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...


ProducerFactory = Callable[[dict[str, Any]], ProducerLike]


@dataclass(frozen=True, slots=True)
class Submitted:
    """What became of one event: its eventId, or why it was rejected."""

    event_id: str | None
    reason: str | None = None
    detail: str | None = None

    @property
    def accepted(self) -> bool:
        return self.event_id is not None


#: The broker's answers when a principal lacks READ on the topic or its (throwaway) group.
_READ_REFUSALS = frozenset(
    {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}
)


def _read_refused(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() in _READ_REFUSALS


def _is_permanent(err: KafkaError) -> bool:
    return err.code() in PERMANENT_ERRORS


class Publisher:
    """Publishes one process's events to the events topic; see the module docstring.

    One publisher per registry: its metrics are registered on ``registry`` when one is given
    (that needs prometheus-client, the ``services`` extra); without one, :meth:`stats` still
    counts everything. The constructor raises on unusable configuration (bad Kafka options, an
    unwritable spool folder); after that, nothing raises into the caller.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        redactor: Redactor = default_redactor,
        registry: CollectorRegistry | None = None,
        topic: str | None = None,
        producer_overrides: Mapping[str, Any] | None = None,
        producer_factory: ProducerFactory | None = None,
        retry_backoff_s: float = 0.5,
        retry_backoff_max_s: float = 10.0,
        drain_chunk: int = 500,
        log_rejections: bool = True,
        protector: Protector | None = None,
    ) -> None:
        self._settings = settings
        #: replaces protected content by references (None: no content store, no cost)
        self._protect = protector if protector is not None else protector_from_settings(settings)
        #: makes the protected content durable, in each group commit before the spool's fsync
        self._sync_content = self._protect.sync if isinstance(self._protect, Durable) else None
        self._topic = topic or settings.events_topic
        self._redactor = redactor
        self._codec = EventCodec()
        self._limits = EventLimits.from_settings(settings)
        self._metrics = PublisherMetrics(registry)
        self._sequences = SequenceCounter()
        self._log_rejections = log_rejections
        self._lock = threading.RLock()
        self._commit_lock = threading.Lock()
        self._acked: dict[int, int] = {}
        self._backoff = Backoff(retry_backoff_s, max(retry_backoff_max_s, retry_backoff_s))
        self._drain_chunk = max(1, drain_chunk)
        self._timeout_s = settings.delivery_timeout_ms / 1000
        self._next_retry = 0.0
        self._probe_first = False
        self._fatal = False
        self._closed = False
        self._warned_failure = False
        self._purge_wanted = False
        #: why the broker refuses this publisher's credentials (None: it does not, or not yet)
        self.refused: str | None = None

        self._config = producer_config(
            settings,
            error_cb=self._on_kafka_error,
            logger=client_logger("runtrail.publisher.librdkafka"),
            **dict(producer_overrides or {}),
        )
        self._factory: ProducerFactory = producer_factory or Producer
        self._naming = naming_options(self._config)
        self._producer = self._factory(self._config)
        self._wal = Wal.open_for(settings.spool_dir, settings.tenant, self._topic)

        # Every accepted event has an index (its place in publish order, continuing the WAL's).
        self._ledger = Ledger(self._wal.cursor.index, self._wal.end.index)
        #: events the broker refused as too large in a batch: resent alone before judged
        #: (only the drain sends them; cleared when it ends, so acks pay nothing for it)
        self._size_suspects = SizeSuspects()
        self._inflight = InFlight()  # handed to librdkafka, no report yet
        self._buffer: list[SpoolRecord] = []  # accepted, not yet written to the WAL
        # Events below _uncertain_until may be on the topic already: look before resending.
        self._uncertain_until = self._wal.end.index
        self._scanned = False
        self._found: set[str] = set()
        self._draining = self._wal.depth > 0
        self._probe_first = self._draining
        self._progress = (self._ledger.first_unsettled, time.monotonic())
        #: every event accepted before this time (``time.monotonic_ns``) is written and fsynced
        self._durable_before_ns = time.monotonic_ns()
        self._committing = False  # a batch taken from _buffer is being written
        self._last_store = time.monotonic()
        self._metrics.set_spool_depth(self._wal.depth)
        # (tenant, run) -> the sequence after the last one the unsent spool holds
        self._spooled_next: dict[tuple[str, str], int] = {}
        if self._draining:
            self._learn_spooled_sequences()
            log.info(
                "found %d unconfirmed events in %s; sending them before new ones",
                self._wal.depth,
                self._wal.folder,
            )

        self._stop = threading.Event()
        #: set when the committer has work: the buffer got its first record, or close
        self._to_commit = threading.Event()
        #: set when the background thread has work: an event handed to librdkafka with none
        #: in flight before, draining entered, or close
        self._to_poll = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"runtrail-publisher[{self._topic}]", daemon=True
        )
        self._committer = threading.Thread(
            target=self._commit_loop, name=f"runtrail-spool[{self._topic}]", daemon=True
        )
        self._thread.start()
        self._committer.start()
        # a replicated events topic acknowledging one copy is said at start, never waited for
        self._durability = (
            start_durability_check(settings, [self._topic], "publisher")
            if producer_factory is None
            else None
        )
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    # --- the agent-facing API ------------------------------------------------------------
    @property
    def topic(self) -> str:
        return self._topic

    @property
    def durable_before_ns(self) -> int:
        """A ``time.monotonic_ns()`` time: every event ``publish()`` accepted before it is in
        the spool on disk (written and fsynced), so it survives a SIGKILL. It is the start of
        the last completed group commit; what came later waits for the next one (about
        ``spool_commit_ms`` plus one write and fsync). With nothing waiting to be written,
        everything accepted so far is durable: now."""
        with self._lock:
            if not self._buffer and not self._committing:
                return time.monotonic_ns()
        return self._durable_before_ns

    def wait_durable(self, accepted_ns: int, timeout: float = 5.0) -> bool:
        """Wait (bounded) until every event accepted before ``accepted_ns`` (a
        ``time.monotonic_ns()`` time) is in the spool on disk: True once it is (it survives a
        SIGKILL), False at the timeout."""
        deadline = time.monotonic() + max(0.0, timeout)
        pause = self._settings.spool_commit_ms / 4000
        while self._durable_before_ns <= accepted_ns:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
        return True

    @property
    def spool_path(self) -> str:
        """The write-ahead spool folder this publisher owns."""
        return str(self._wal.folder)

    def on_event(
        self, event: Event | Mapping[str, Any], *, trace_context: Mapping[str, str] | None = None
    ) -> str | None:
        """Listener hook: publish an :class:`Event` or a JSON-form dict; eventId or None."""
        return self.submit(event, trace_context=trace_context).event_id

    def publish(
        self,
        event_type: str,
        run_id: str,
        data: Mapping[str, Any] | EventData,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        step: int | None = None,
        actor: Actor | Mapping[str, str] | None = None,
        causation_event_id: str | None = None,
        correlation_id: str | None = None,
        tenant_id: str | None = None,
        schema_version: int | None = None,
        trace_context: Mapping[str, str] | None = None,
    ) -> str | None:
        """Build the envelope around ``data`` and publish it; the eventId, or None if rejected."""
        try:
            form = envelope(
                event_type,
                run_id,
                data,
                tenant_id=tenant_id if tenant_id is not None else self._settings.tenant,
                session_id=session_id,
                turn_id=turn_id,
                step=step,
                actor=actor,
                causation_event_id=causation_event_id,
                correlation_id=correlation_id,
                schema_version=schema_version,
            )
        except EventError as exc:
            return self._reject(exc.reason, str(exc)).event_id
        except Exception as exc:
            return self._reject("invalid-event", f"cannot build the envelope: {exc}").event_id
        return self.submit(form, trace_context=trace_context).event_id

    def submit(
        self, event: Event | Mapping[str, Any], *, trace_context: Mapping[str, str] | None = None
    ) -> Submitted:
        """Like :meth:`on_event`, but says why an event was rejected. Never raises."""
        try:
            if self._closed:
                return self._reject("closed", "the publisher is closed")
            form = prepare(event, self._limits, self._settings.tenant, self._redactor)
            if self._protect is not None:
                form = self._protect(form)
            return self._enqueue(validate(form), trace_context)
        except EventError as exc:
            return self._reject(exc.reason, str(exc))
        except Rejected as exc:
            return self._reject(exc.reason, str(exc))
        except ProtectFailed as exc:
            return self._reject("protect-failed", str(exc))
        except Exception as exc:  # never into the agent
            log.exception("unexpected error while publishing")
            return self._reject("internal-error", f"{type(exc).__name__}: {exc}")

    def submit_record(self, record: SpoolRecord) -> Submitted:
        """Send a record that is no runtrail event, already encoded (the raw spans the OTLP
        receivers forward, on their own topic), the way events go: in order, through the
        write-ahead spool while the broker is away, looked up on the topic by its
        ``event_id`` (also its ``rt.event_id`` header) before a resend. Never raises."""
        try:
            self._limits.check_size(len(record.value))
            with self._lock:
                if self._closed:
                    raise Rejected("closed", "the publisher is closed")
                self._route(record)
            return Submitted(record.event_id)
        except EventError as exc:
            return self._reject(exc.reason, str(exc))
        except Rejected as exc:
            return self._reject(exc.reason, str(exc))
        except Exception as exc:  # never into the caller
            log.exception("unexpected error while publishing a record")
            return self._reject("internal-error", f"{type(exc).__name__}: {exc}")

    def set_next_sequence(
        self, run_id: str, next_sequence: int, *, tenant_id: str | None = None
    ) -> None:
        """Continue ``run_id`` of ``tenant_id`` (default: this publisher's tenant) at
        ``next_sequence`` (a run resumed in a new process)."""
        if next_sequence < 1:
            raise ValueError("sequences start at 1")
        tenant = tenant_id if tenant_id is not None else self._settings.tenant
        spooled = self._spooled_next.get((tenant, run_id), 0)
        if next_sequence < spooled:
            # events of the dead process still in the spool go first and hold these numbers
            log.info(
                "run %r continues at sequence %d, not %d: the spool still holds its events up "
                "to %d (drain() before a resume barrier lets the resume see them)",
                run_id,
                spooled,
                next_sequence,
                spooled - 1,
            )
            next_sequence = spooled
        self._sequences.set_next(tenant, run_id, next_sequence)

    def next_sequence(self, run_id: str, *, tenant_id: str | None = None) -> int:
        """The sequence the next event of ``run_id`` takes here: what a run that stops (waits
        for input) records, so the process that resumes it continues at that number."""
        tenant = tenant_id if tenant_id is not None else self._settings.tenant
        return self._sequences.peek(tenant, run_id)

    def _learn_spooled_sequences(self) -> None:
        """Note the runs and sequences the spool found at start still holds, so this process
        numbers those runs after them: they reach the topic before anything new."""
        pos = self._wal.cursor
        while True:
            entries = self._wal.read(pos, 5000)
            if not entries:
                return
            for entry in entries:
                record = entry.record
                if record is None or record.sequence is None or record.key is None:
                    continue
                tenant = dict(record.headers).get("rt.tenant", b"").decode("utf-8", "replace")
                key = (tenant, record.key.decode("utf-8", "replace"))
                self._sequences.commit(key[0], key[1], record.sequence)
                if record.sequence + 1 > self._spooled_next.get(key, 1):
                    self._spooled_next[key] = record.sequence + 1
            pos = entries[-1].end

    def forget_run(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """Drop a finished run's sequence counter."""
        tenant = tenant_id if tenant_id is not None else self._settings.tenant
        self._sequences.forget(tenant, run_id)

    def flush(self, timeout: float = 10.0) -> int:
        """Wait until every event so far is acknowledged or in the spool; how many are not."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                left = len(self._inflight)
            remaining = deadline - time.monotonic()
            if left == 0 or remaining <= 0:
                break
            self._producer.poll(min(remaining, 0.05))
        self._commit()
        return left

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait (bounded) until the spool is empty and the publisher is back in direct mode."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                done = not self._draining and not self._inflight
            if done or time.monotonic() >= deadline or not self._thread.is_alive():
                return done
            time.sleep(0.05)

    def sync(self) -> None:
        """Write and fsync every accepted event to the spool now (instead of at the next
        group commit): after it returns, they survive this process."""
        self._commit()

    def close(self, timeout: float = 10.0) -> None:
        """Flush, or drain the spool while it is being sent (bounded by ``timeout``); what is
        still unconfirmed stays in the spool for the next publisher on the same folder.
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._atexit)
        deadline = time.monotonic() + max(0.0, timeout)
        if self._draining:  # the spool is being sent: give it the time we have
            self.drain(timeout)
        self._stop.set()
        self._to_commit.set()
        self._to_poll.set()
        # a probe or a scan can hold the thread a little; it produces nothing once stop is set
        self._thread.join(timeout=max(3.0, deadline - time.monotonic()))
        self._committer.join(timeout=5.0)
        if self._durability is not None:
            self._durability.join(timeout=CHECK_TIMEOUT_S)
        try:
            if not self._draining:
                self.flush(deadline - time.monotonic())
            self._purge_and_collect(self._producer)
        except Exception:
            log.exception("error while closing the producer")
        with self._lock:
            if self._inflight:
                log.warning("%d events unconfirmed at close stay in the spool", len(self._inflight))
                self._inflight.clear()
            if self._ledger.pending:
                self._draining = True
        try:
            self._commit(store=True)
            self._wal.close()
        except OSError:
            log.exception("error while closing the spool %s", self._wal.folder)
        depth = self._ledger.pending
        self._metrics.set_spool_depth(depth)
        if depth:
            log.warning("closed with %d events in the spool %s", depth, self._wal.folder)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def acked_offsets(self) -> dict[int, int]:
        """Per partition of the topic, the highest offset the broker acknowledged to us."""
        with self._lock:
            return dict(self._acked)

    def stats(self) -> PublisherStats:
        with self._lock:
            draining = self._draining
            depth = self._ledger.pending if draining else 0
        self._metrics.set_spool_depth(depth)
        return self._metrics.snapshot(spooling=draining)

    # --- numbering and routing an event ------------------------------------------------------
    def _enqueue(self, valid: Validated, trace_context: Mapping[str, str] | None) -> Submitted:
        """Number, encode and route one validated event, under the lock: sequences are taken
        in the order the events are routed."""
        event = valid.event
        tenant, run = event.tenant_id, event.run_id
        with self._lock:
            if self._closed:
                raise Rejected("closed", "the publisher is closed")
            sequence = self._sequences.peek(tenant, run) if valid.assign else event.sequence
            record = encode(self._codec, self._limits, valid, sequence, trace_context)
            self._route(record)
            self._sequences.commit(tenant, run, sequence)
        return Submitted(event.event_id)

    def _reject(self, reason: str, detail: str) -> Submitted:
        self._metrics.count("rejected")
        log.log(
            logging.WARNING if self._log_rejections else logging.DEBUG,
            "event rejected (%s): %s",
            reason,
            detail,
        )
        return Submitted(None, reason, detail)

    # --- routing (caller holds the lock) ----------------------------------------------------
    def _route(self, record: SpoolRecord) -> None:
        """Give the record its index, queue it for the WAL and, in direct mode, produce it."""
        index = self._ledger.next_index  # taken below, once the record is certainly kept
        if not self._draining:
            try:
                if self._produce_with_backpressure(record):
                    if not self._inflight:
                        self._to_poll.set()
                    self._inflight.add(index, record.key, record.value)
                else:
                    self._enter_draining("the local producer queue stays full")
            except KafkaException as exc:
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if err is not None and _is_permanent(err):
                    raise Rejected("refused-by-producer", err.str()) from exc
                if err is not None and err.fatal():
                    self._fatal = True
                self._enter_draining(f"produce failed: {exc}")
        if self._draining:
            self._metrics.count("spooled")
        self._ledger.take()
        if not self._buffer:
            self._to_commit.set()
        self._buffer.append(record)

    def _produce_with_backpressure(self, record: SpoolRecord) -> bool:
        """A full local queue means the broker is slower than the agent, not gone: wait up to
        ``publish_max_block_ms`` for room (serving delivery reports meanwhile). False: give
        up, the event waits in the spool rather than the agent stalling for long."""
        deadline = 0.0
        while True:
            try:
                self._produce(record)
                return True
            except BufferError:
                now = time.monotonic()
                if not deadline:
                    deadline = now + self._settings.publish_max_block_ms / 1000
                elif now >= deadline:
                    return False
                self._producer.poll(0.005)
                if self._draining:  # a report served meanwhile failed: this one must wait too
                    return False

    def _produce(self, record: SpoolRecord) -> None:
        """Hand ``record`` to librdkafka; its report comes to the one shared callback."""
        self._producer.produce(
            self._topic,
            value=record.value,
            key=record.key,
            headers=list(record.headers),
            timestamp=record.timestamp_ms or 0,
            on_delivery=self._on_report,
        )

    def _enter_draining(self, why: str, purge: bool = False) -> None:
        """Stop producing directly; what is unconfirmed may be on the topic (look first)."""
        if not self._draining:
            self._draining = True
            self._metrics.count("spooled", self._ledger.pending)
            log.warning("events go through the spool %s: %s", self._wal.folder, why)
        self._uncertain_until = max(self._uncertain_until, self._ledger.next_index)
        self._scanned = False
        self._probe_first = True
        self._next_retry = time.monotonic() + self._backoff.delay()
        if purge:
            self._purge_wanted = True
        self._to_poll.set()

    def _note_ack(self, msg: Any) -> None:
        partition, offset = msg.partition(), msg.offset()
        if partition is not None and offset is not None and offset > self._acked.get(partition, -1):
            self._acked[partition] = offset
        self._metrics.count("sent")

    # --- delivery reports (called from poll, in whichever thread polled) ---------------------
    def _on_report(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            index = self._inflight.take(msg)
            if index is None:
                return  # abandoned after a purge that did not report it
            if err is None:
                self._ledger.settle(index)
                self._note_ack(msg)
            elif too_large(err) and not self._size_suspects.refused(index):
                # maybe refused only beside the large one in a batch: resent alone, from the
                # spool, before it is judged
                self._enter_draining("the broker refused a batch as too large", purge=True)
            elif _is_permanent(err):
                self._size_suspects.discard(index)
                self._ledger.settle(index)
                self._metrics.count("rejected")
                log.error("broker refused an event for good: %s", err.str())
            else:
                if err.code() in _PURGED:
                    self._metrics.delivery_error()  # taken back: resent from the spool
                else:
                    self._delivery_failed(err)
                # nothing queued behind it may go first: purge and resend from the spool
                self._enter_draining(f"delivery failed: {err.str()}", purge=True)

    def _delivery_failed(self, err: KafkaError) -> None:
        self._metrics.delivery_error()
        if err.fatal():
            self._fatal = True
        level = logging.DEBUG if self._warned_failure else logging.WARNING
        self._warned_failure = True
        log.log(level, "delivery failed: %s", err.str())

    def _on_kafka_error(self, err: KafkaError) -> None:
        if is_auth_failure(err):
            # told once: the agent goes on, its events wait in the spool until the credentials
            # are fixed and the agent restarted (a retry with the same ones cannot succeed)
            if self.refused is None:
                self.refused = describe(err, self._naming)
                log.error("%s; events are kept in the spool %s", self.refused, self.spool_path)
            return
        if err.fatal():
            self._fatal = True
            log.error("fatal producer error, the producer will be recreated: %s", err.str())
        else:
            log.debug("kafka client error: %s", err.str())

    # --- the group commit -------------------------------------------------------------------
    def _commit_loop(self) -> None:
        """A group commit ``spool_commit_ms`` after the first record of a batch is accepted;
        asleep while nothing is accepted, but for moving and storing the cursor once a second
        while events are unacknowledged or the stored cursor lags."""
        interval = self._settings.spool_commit_ms / 1000
        while not self._stop.is_set():
            with self._lock:
                idle = self._wal.caught_up
            self._to_commit.wait(None if idle else 1.0)
            if self._stop.wait(interval):
                return  # close() commits what is left
            self._to_commit.clear()  # before the batch is taken: a later record sets it again
            try:
                self._commit()
            except Exception:
                log.exception("spool commit error")
                self._stop.wait(0.5)

    def _commit(self, store: bool = False) -> None:
        """Write what was accepted since the last commit (one write, one fsync), move the
        cursor past what is settled, and store it about once a second."""
        with self._commit_lock:
            with self._lock:
                started = time.monotonic_ns()  # everything accepted before it is in the batch
                batch, self._buffer = self._buffer, []
                self._committing = True
            try:
                if batch:
                    if self._sync_content is not None:
                        self._sync_content()  # an event on disk refers to content on disk
                    self._wal.append(batch)
            except OSError as exc:
                with self._lock:
                    self._buffer[:0] = batch  # kept in memory; retried next commit
                    self._committing = False
                self._to_commit.set()
                log.error("cannot write the spool %s: %s", self._wal.folder, exc)
                return
            with self._lock:
                self._durable_before_ns = started
                self._committing = False
            with self._lock:
                first = self._ledger.first_unsettled
            self._wal.advance(first)
            now = time.monotonic()
            if store or now - self._last_store >= 1.0:
                self._last_store = now
                self._wal.store_cursor()

    # --- the background thread ------------------------------------------------------------
    def _run(self) -> None:
        """Serve delivery callbacks; purge on failure; resend the spool; recover fatal errors."""
        while not self._stop.is_set():
            try:
                with self._lock:
                    idle = not (
                        self._inflight or self._draining or self._purge_wanted or self._fatal
                    )
                    if idle:
                        self._to_poll.clear()  # under the lock: _route sets it after
                if idle:
                    # nothing can report: no wake-ups until an event is produced (errors the
                    # client raised meanwhile are served within the second)
                    self._to_poll.wait(1.0)
                self._producer.poll(0.05)
                if self._purge_wanted:
                    self._purge_and_collect(self._producer)
                if self._fatal:
                    self._recreate_producer()
                self._check_stall()
                if self._draining and time.monotonic() >= self._next_retry:
                    self._drain_step()
            except Exception:
                log.exception("publisher background thread error")
                self._stop.wait(0.5)

    def _check_stall(self) -> None:
        """No acknowledgement for ``delivery_timeout_ms`` while events are in flight: the
        broker is gone. Our own timeout, not librdkafka's per-message one, so a whole backlog
        is taken back at once and no later event of a run is delivered before an earlier."""
        now = time.monotonic()
        with self._lock:
            mark = self._ledger.first_unsettled
            if not self._inflight or mark != self._progress[0]:
                self._progress = (mark, now)
                return
            if now - self._progress[1] > self._timeout_s:
                self._enter_draining(f"no acknowledgement for {self._timeout_s:g} s", purge=True)

    def _drain_step(self) -> None:
        with self._lock:
            if self._inflight or self._purge_wanted:
                return  # earlier deliveries are unsettled; their outcome comes first
            if self._ledger.pending == 0:
                self._draining = False
                self._backoff.reset()
                self._warned_failure = False
                self._size_suspects.clear()  # all settled (indices are never reused)
                self._metrics.set_spool_depth(0)
                log.info("spool drained; publishing directly again")
                return
            start = self._ledger.first_unsettled
            if start >= self._wal.end.index:
                return  # not written yet: the next group commit writes it
            scan = not self._scanned and start < self._uncertain_until
        if self._probe_first and not self._broker_reachable():
            self._retry_later()
            return
        if scan and not self._scan(start):
            self._retry_later()
            return
        entries = self._wal.read(self._wal.position_of(start), self._drain_chunk)
        if not entries:
            self._skip_unreadable(start)
            return
        produced = self._produce_chunk(entries)
        deadline = time.monotonic() + self._timeout_s
        while not self._stop.is_set() and not self._purge_wanted:
            with self._lock:
                if not self._inflight:
                    break
            if time.monotonic() >= deadline:
                with self._lock:
                    self._enter_draining(f"no acknowledgement for {self._timeout_s:g} s")
                break
            self._producer.poll(0.05)
        if self._stop.is_set():
            return  # close() collects what is in flight
        if self._inflight:
            self._purge_and_collect(self._producer)
        with self._lock:
            end = None
            for entry in entries:
                if entry.index >= self._ledger.first_unsettled:
                    break
                end = entry.end
            if end is not None:
                self._wal.advance_to(end)
            if produced and produced[-1] >= self._ledger.first_unsettled:
                self._enter_draining("a resent event was not acknowledged")
                self._backoff.grow()
            else:
                self._backoff.reset()
                self._probe_first = False
                self._next_retry = 0.0

    def _skip_unreadable(self, start: int) -> None:
        """Nothing can be read from ``start`` although the log goes on: a segment is missing
        or corrupt. Count what is skipped as dropped, loudly, rather than stall for ever."""
        with self._lock:
            end = self._wal.end
            lost = [i for i in range(start, end.index) if not self._ledger.is_settled(i)]
            for index in lost:
                self._ledger.settle(index)
        self._metrics.count("dropped", len(lost))
        log.error(
            "%d spooled events from %d are unreadable in %s: LOST",
            len(lost),
            start,
            self._wal.folder,
        )
        self._wal.advance_to(end)

    def _produce_chunk(self, entries: list[WalEntry]) -> list[int]:
        """Produce the entries still unsettled, in order; the indices produced."""
        produced: list[int] = []
        with self._lock:
            if self._stop.is_set():
                return produced  # close() has begun: it must not race a new chunk
            for entry in entries:
                index, record = entry.index, entry.record
                if self._ledger.is_settled(index):
                    continue
                if record is None:
                    self._ledger.settle(index)
                    self._metrics.count("dropped")
                    continue
                if record.event_id is not None and record.event_id in self._found:
                    self._found.discard(record.event_id)
                    self._ledger.settle(index)
                    self._metrics.count("recovered")
                    continue
                alone = index in self._size_suspects
                if alone and produced:
                    break  # a suspect goes in a chunk of its own: the next one
                try:
                    self._produce(record)
                except BufferError:
                    break
                except KafkaException as exc:
                    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                    if err is not None and _is_permanent(err):
                        self._ledger.settle(index)
                        self._metrics.count("rejected")
                        log.error("dropping a spooled event the producer refuses: %s", exc)
                        continue
                    break
                self._inflight.add(index, record.key, record.value)
                produced.append(index)
                if alone:
                    break  # and nothing behind it in its batch
        return produced

    def _scan(self, start: int) -> bool:
        """Look up on the topic the unconfirmed events from ``start``; False if it cannot."""
        with self._lock:
            until = self._uncertain_until
        ids: set[str] = set()
        since: int | None = None
        pos = self._wal.position_of(start)
        while pos.index < until:
            entries = self._wal.read(pos, 5000)
            if not entries:
                break
            for entry in entries:
                record = entry.record
                if entry.index < start or entry.index >= until or record is None:
                    continue
                if record.event_id is None or record.timestamp_ms is None:
                    continue  # a JSON-lines spool record (no id): resent at least once
                ids.add(record.event_id)
                if since is None or record.timestamp_ms < since:
                    since = record.timestamp_ms
            pos = entries[-1].end
        try:
            found = (
                already_on_topic(
                    self._settings.kafka_config(), self._topic, ids, since, self._timeout_s + 10
                )
                if since is not None
                else set()
            )
        except KafkaException as exc:
            if not _read_refused(exc):
                log.warning("cannot look up unconfirmed events on %s yet: %s", self._topic, exc)
                return False
            # a least-privilege agent may write the topic but not read it: resend unchecked
            # (at least once; every consumer skips an eventId it has already seen)
            log.warning(
                "this publisher may not read %s, so its %d unconfirmed event(s) are resent "
                "without looking them up; a consumer skips any it already has",
                self._topic,
                len(ids),
            )
            found = set()
        with self._lock:
            self._found |= found
            self._scanned = True
        return True

    def _retry_later(self) -> None:
        self._probe_first = True
        self._next_retry = time.monotonic() + self._backoff.next_delay()

    def _broker_reachable(self) -> bool:
        """A cheap metadata request, so a dead broker costs no message timeouts."""
        try:
            self._producer.list_topics(self._topic, timeout=2.0)
        except KafkaException:
            return False
        return True

    def _recreate_producer(self) -> None:
        """After a fatal error (e.g. idempotence state lost) the producer is unusable."""
        old = self._producer
        with self._lock:
            self._enter_draining("the producer hit a fatal error")
        self._purge_and_collect(old)
        with self._lock:
            self._inflight.clear()
            self._producer = self._factory(self._config)
            self._fatal = False
        log.warning("producer recreated after a fatal error")

    def _purge_and_collect(self, producer: ProducerLike) -> None:
        """Take back everything queued or in flight, and serve the resulting reports."""
        self._purge_wanted = False
        producer.purge(in_queue=True, in_flight=True, blocking=True)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            producer.poll(0.05)
            with self._lock:
                if not self._inflight:
                    return
        with self._lock:
            if self._inflight:
                log.warning("%d purged events did not report; resent", len(self._inflight))
                self._inflight.clear()


def _close_at_exit(ref: weakref.ref[Publisher]) -> None:
    """At interpreter exit, close a publisher the agent forgot to close (nothing is lost)."""
    publisher = ref()
    if publisher is not None:
        publisher.close(timeout=5.0)
