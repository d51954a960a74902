"""The agent-side publisher: validated, redacted, sequenced events to Kafka, never raising.

An agent runtime attaches a :class:`Publisher` as a listener (``on_event``) or calls
:meth:`Publisher.publish`. Each event is redacted, validated, numbered within its run, encoded
and produced keyed by run ID. Nothing here raises into the agent (design principle 3): invalid
events are rejected (counted, logged, ``None`` returned), and events the broker cannot take
go to a local spool and are resent, in order, when it returns.

Delivery modes:

* **direct** — events are produced straight to Kafka;
* **spooling** — entered on the first failed delivery report (or a full local queue, or a
  non-empty spool found at start-up). Every later event is appended to the spool too, behind
  the failed ones, so a run's events stay in order. A daemon thread (which also serves the
  producer's delivery callbacks, so the agent never has to poll) resends the spool in chunks,
  advances a durable cursor past what the broker acknowledged and returns to direct mode only
  once the spool is empty and nothing is in flight.

At-least-once, not exactly-once: a delivery that timed out may in fact have been written by
the broker, so resending it from the spool can duplicate it on the topic. Consumers drop
duplicates by ``eventId`` (and detect them by ``sequence``).
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
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import (
    CURRENT_VERSIONS,
    Actor,
    Event,
    EventCodec,
    EventData,
    EventError,
    InvalidEvent,
    UnknownEventType,
    validate_json_form,
)
from runtrail.publisher.delivery import PendingQueue, SlotState
from runtrail.publisher.drain import DrainChunk, Outcome
from runtrail.publisher.envelope_defaults import (
    DEFAULT_ACTOR,
    fill_defaults,
    new_event_id,
    utc_now_iso,
)
from runtrail.publisher.headers import event_headers
from runtrail.publisher.metrics import PublisherMetrics, PublisherStats
from runtrail.publisher.producer_config import producer_config
from runtrail.publisher.redaction import Redactor, SecretInIdentifier, default_redactor
from runtrail.publisher.sequencing import SequenceCounter
from runtrail.publisher.spool import Spool, SpoolRecord

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

#: Broker verdicts that no resend can change: spooling such an event would block the spool.
PERMANENT_ERRORS: frozenset[int] = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError._INVALID_ARG,
    }
)


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


class _Rejected(Exception):
    """Internal: the producer refused an event for good."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _is_permanent(err: KafkaError) -> bool:
    return err.code() in PERMANENT_ERRORS


class Publisher:
    """Publishes one process's events to the events topic; see the module docstring.

    One publisher per registry: its metrics are registered on ``registry`` (a private one
    when None). The constructor raises on unusable configuration (bad Kafka options, an
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
    ) -> None:
        self._settings = settings
        self._topic = topic or settings.events_topic
        self._redactor = redactor
        self._codec = EventCodec()
        self._metrics = PublisherMetrics(registry if registry is not None else CollectorRegistry())
        self._sequences = SequenceCounter()
        self._lock = threading.RLock()
        self._pending = PendingQueue()
        self._acked: dict[int, int] = {}
        self._backoff_min = retry_backoff_s
        self._backoff_max = max(retry_backoff_max_s, retry_backoff_s)
        self._backoff = retry_backoff_s
        self._drain_chunk = max(1, drain_chunk)
        self._chunk: DrainChunk | None = None
        self._next_retry = 0.0
        self._probe_first = False
        self._fatal = False
        self._closed = False
        self._warned_failure = False
        self._last_sync = time.monotonic()

        self._config = producer_config(
            settings,
            error_cb=self._on_kafka_error,
            logger=logging.getLogger("runtrail.publisher.librdkafka"),
            **dict(producer_overrides or {}),
        )
        self._factory: ProducerFactory = producer_factory or Producer
        self._producer = self._factory(self._config)
        self._spool = Spool.open_for(settings.spool_dir, settings.tenant, self._topic)
        self._spooling = self._spool.depth > 0
        self._metrics.set_spool_depth(self._spool.depth)
        if self._spooling:
            log.info(
                "found %d spooled events in %s; sending them before new ones",
                self._spool.depth,
                self._spool.path,
            )

        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"runtrail-publisher[{self._topic}]", daemon=True
        )
        self._thread.start()
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    # --- the agent-facing API ------------------------------------------------------------
    @property
    def topic(self) -> str:
        return self._topic

    @property
    def spool_path(self) -> str:
        return str(self._spool.path)

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
            version = (
                schema_version if schema_version is not None else CURRENT_VERSIONS.get(event_type)
            )
            if version is None:
                raise UnknownEventType(f"unknown event type {event_type!r}")
            if isinstance(data, EventData):
                payload: Any = data.model_dump(mode="json", by_alias=True)
            else:
                payload = dict(data)
            if isinstance(actor, Actor):
                who: Any = actor.model_dump(mode="json", by_alias=True)
            else:
                who = dict(actor) if actor is not None else dict(DEFAULT_ACTOR)
            form: JsonDict = {
                "eventId": new_event_id(),
                "runId": run_id,
                "tenantId": tenant_id if tenant_id is not None else self._settings.tenant,
                "type": event_type,
                "schemaVersion": version,
                "occurredAt": utc_now_iso(),
                "actor": who,
                "causationEventId": causation_event_id,
                "correlationId": correlation_id if correlation_id is not None else run_id,
                "sessionId": session_id,
                "turnId": turn_id,
                "step": step,
                "data": payload,
            }
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
            form = self._prepare(event)
            assign = form.get("sequence") is None
            if assign:
                form["sequence"] = "1"  # placeholder: the real number is taken at enqueue
            validated = validate_json_form(form)
            return self._enqueue(validated, assign, trace_context)
        except EventError as exc:
            return self._reject(exc.reason, str(exc))
        except _Rejected as exc:
            return self._reject(exc.reason, str(exc))
        except Exception as exc:  # never into the agent
            log.exception("unexpected error while publishing")
            return self._reject("internal-error", f"{type(exc).__name__}: {exc}")

    def set_next_sequence(self, run_id: str, next_sequence: int) -> None:
        """Continue ``run_id`` at ``next_sequence`` (a run resumed in a new process)."""
        self._sequences.set_next(run_id, next_sequence)

    def forget_run(self, run_id: str) -> None:
        """Drop a finished run's sequence counter."""
        self._sequences.forget(run_id)

    def flush(self, timeout: float = 10.0) -> int:
        """Wait until every event so far is acknowledged or spooled; returns how many are not."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                left = len(self._pending)
            remaining = deadline - time.monotonic()
            if left == 0 or remaining <= 0:
                return left
            self._producer.poll(min(remaining, 0.05))

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait (bounded) until the spool is empty and the publisher is back in direct mode."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                done = not self._spooling and len(self._pending) == 0
            if done or time.monotonic() >= deadline or not self._thread.is_alive():
                return done
            time.sleep(0.05)

    def close(self, timeout: float = 10.0) -> None:
        """Flush (bounded by ``timeout``), then spool whatever is still unsettled; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._atexit)
        deadline = time.monotonic() + max(0.0, timeout)
        self._stop.set()
        # a probe can hold the thread for up to 2 s; it produces nothing once stop is set
        self._thread.join(timeout=max(3.0, deadline - time.monotonic()))
        try:
            self.flush(deadline - time.monotonic())
            self._producer.flush(max(0.0, deadline - time.monotonic()))
            self._purge_and_collect(self._producer)
        except Exception:
            log.exception("error while closing the producer")
        with self._lock:
            if self._chunk is not None:
                self._settle_chunk(self._chunk)
            lost = self._pending.abandon_in_flight()
            if lost:
                log.warning("%d events unsettled at close go to the spool", lost)
            self._release()
            depth = self._spool.depth
            try:
                self._spool.close()
            except OSError:
                log.exception("error while closing the spool %s", self._spool.path)
        if depth:
            log.warning("closed with %d events in the spool %s", depth, self._spool.path)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def acked_offsets(self) -> dict[int, int]:
        """Per partition of the topic, the highest offset the broker acknowledged to us."""
        with self._lock:
            return dict(self._acked)

    def stats(self) -> PublisherStats:
        return self._metrics.snapshot(spooling=self._spooling)

    # --- preparing an event ----------------------------------------------------------------
    def _prepare(self, event: Event | Mapping[str, Any]) -> JsonDict:
        """The redacted JSON form with envelope defaults filled in."""
        if isinstance(event, Event):
            form = event.json_form()
        elif isinstance(event, Mapping):
            form = dict(event)
        else:
            raise InvalidEvent(
                f"expected an Event or a JSON-form object, got {type(event).__name__}"
            )
        form = fill_defaults(form, self._settings.tenant)
        try:
            redacted = self._redactor(form)
        except SecretInIdentifier as exc:  # its message names the field, never the value
            raise _Rejected("secret-in-identifier", str(exc)) from exc
        except Exception as exc:
            raise _Rejected(
                "redaction-failed", f"the redactor raised {type(exc).__name__}"
            ) from exc
        if not isinstance(redacted, dict):
            raise _Rejected("redaction-failed", "the redactor did not return a dict")
        return redacted

    def _enqueue(
        self, event: Event, assign: bool, trace_context: Mapping[str, str] | None
    ) -> Submitted:
        wire = event.json_form()
        with self._lock:
            if self._closed:
                raise _Rejected("closed", "the publisher is closed")
            sequence = self._sequences.peek(event.run_id) if assign else event.sequence
            wire["sequence"] = str(sequence)
            value = self._codec.encode_json_form(wire)
            record = SpoolRecord(
                key=event.run_id.encode("utf-8"),
                value=value,
                headers=event_headers(wire, trace_context),
                event_id=event.event_id,
            )
            self._route(record)
            self._sequences.commit(event.run_id, sequence)
        return Submitted(event.event_id)

    def _reject(self, reason: str, detail: str) -> Submitted:
        self._metrics.count("rejected")
        log.warning("event rejected (%s): %s", reason, detail)
        return Submitted(None, reason, detail)

    # --- routing (caller holds the lock) ----------------------------------------------------
    def _route(self, record: SpoolRecord) -> None:
        if self._spooling:
            self._pending.add(record, SlotState.SPOOL)
            self._release()
            return
        ticket = self._pending.add(record, SlotState.IN_FLIGHT)
        try:
            self._produce_with_backpressure(
                record, functools.partial(self._on_direct_report, ticket)
            )
        except BufferError:
            self._pending.settle(ticket, SlotState.SPOOL)
            self._enter_spooling("the local producer queue is full")
            self._release()
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and _is_permanent(err):
                self._pending.discard(ticket)
                raise _Rejected("refused-by-producer", err.str()) from exc
            if err is not None and err.fatal():
                self._fatal = True
            self._pending.settle(ticket, SlotState.SPOOL)
            self._enter_spooling(f"produce failed: {exc}")
            self._release()

    def _produce_with_backpressure(
        self, record: SpoolRecord, callback: Callable[[Any, Any], None]
    ) -> None:
        """A full local queue means the broker is slower than the agent, not gone: wait up to
        ``publish_max_block_ms`` for room (serving delivery reports meanwhile), then give up
        with BufferError so the event is spooled rather than the agent stalled for long."""
        deadline = 0.0
        while True:
            try:
                self._produce(record, callback)
                return
            except BufferError:
                now = time.monotonic()
                if not deadline:
                    deadline = now + self._settings.publish_max_block_ms / 1000
                elif now >= deadline:
                    raise
                self._producer.poll(0.005)

    def _produce(self, record: SpoolRecord, callback: Callable[[Any, Any], None]) -> None:
        self._producer.produce(
            self._topic,
            value=record.value,
            key=record.key,
            headers=list(record.headers),
            on_delivery=callback,
        )

    def _enter_spooling(self, why: str) -> None:
        if not self._spooling:
            self._spooling = True
            self._probe_first = True
            self._next_retry = time.monotonic() + self._backoff
            log.warning("spooling events to %s: %s", self._spool.path, why)

    def _release(self) -> None:
        """Append the settled prefix's failed events to the spool, in publish order."""
        appended = 0
        for record in self._pending.release():
            try:
                self._spool.append(record)
                appended += 1
            except OSError as exc:
                self._metrics.count("dropped")
                log.error("event %s LOST: cannot write the spool: %s", record.event_id, exc)
        if appended:
            self._metrics.count("spooled", appended)
            self._metrics.set_spool_depth(self._spool.depth)

    def _note_ack(self, msg: Any) -> None:
        partition, offset = msg.partition(), msg.offset()
        if partition is not None and offset is not None and offset > self._acked.get(partition, -1):
            self._acked[partition] = offset
        self._metrics.count("sent")

    # --- delivery reports (called from poll, in whichever thread polled) ---------------------
    def _on_direct_report(self, ticket: int, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            if err is None:
                if self._pending.settle(ticket, SlotState.ACKED):
                    self._note_ack(msg)
            elif _is_permanent(err):
                if self._pending.settle(ticket, SlotState.DROPPED):
                    self._metrics.count("rejected")
                    log.error("broker refused an event for good: %s", err.str())
            elif self._pending.settle(ticket, SlotState.SPOOL):
                self._delivery_failed(err)
                self._enter_spooling(f"delivery failed: {err.str()}")
            self._release()

    def _on_drain_report(
        self, chunk: DrainChunk, index: int, err: KafkaError | None, msg: Any
    ) -> None:
        with self._lock:
            if err is None:
                if chunk.mark(index, Outcome.ACKED):
                    self._note_ack(msg)
            elif _is_permanent(err):
                if chunk.mark(index, Outcome.SKIPPED):
                    self._metrics.count("rejected")
                    log.error("broker refused a spooled event for good: %s", err.str())
            elif chunk.mark(index, Outcome.FAILED):
                self._delivery_failed(err)

    def _delivery_failed(self, err: KafkaError) -> None:
        self._metrics.delivery_error()
        if err.fatal():
            self._fatal = True
        level = logging.DEBUG if self._warned_failure else logging.WARNING
        self._warned_failure = True
        log.log(level, "delivery failed: %s", err.str())

    def _on_kafka_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = True
            log.error("fatal producer error, the producer will be recreated: %s", err.str())
        else:
            log.debug("kafka client error: %s", err.str())

    # --- the background thread ------------------------------------------------------------
    def _run(self) -> None:
        """Serve delivery callbacks; resend the spool while spooling; recover fatal errors."""
        while not self._stop.is_set():
            try:
                self._producer.poll(0.1)
                if self._fatal:
                    self._recreate_producer()
                if self._spooling and time.monotonic() >= self._next_retry:
                    self._drain_step()
                self._sync_spool()
            except Exception:
                log.exception("publisher background thread error")
                self._stop.wait(0.5)

    def _drain_step(self) -> None:
        with self._lock:
            if len(self._pending):
                return  # earlier direct deliveries are unsettled; their failures go first
            if self._spool.depth == 0:
                self._spooling = False
                self._backoff = self._backoff_min
                self._warned_failure = False
                self._metrics.set_spool_depth(0)
                log.info("spool drained; publishing directly again")
                return
            entries = self._spool.read(self._drain_chunk)
        if self._probe_first and not self._broker_reachable():
            self._retry_later()
            return
        chunk = DrainChunk(entries)
        with self._lock:
            if self._stop.is_set():
                return  # close() has begun: it must not race a new chunk
            self._chunk = chunk
            for index, entry in enumerate(entries):
                if entry.record is None:
                    chunk.mark(index, Outcome.SKIPPED)
                    self._metrics.count("dropped")
                    continue
                try:
                    self._produce(
                        entry.record, functools.partial(self._on_drain_report, chunk, index)
                    )
                except BufferError:
                    chunk.fail_rest(index)
                    break
                except KafkaException as exc:
                    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                    if err is not None and _is_permanent(err):
                        chunk.mark(index, Outcome.SKIPPED)
                        self._metrics.count("rejected")
                        log.error("dropping a spooled event the producer refuses: %s", exc)
                        continue
                    chunk.fail_rest(index)
                    break
        deadline = time.monotonic() + self._settings.delivery_timeout_ms / 1000 + 5.0
        while chunk.pending and time.monotonic() < deadline and not self._stop.is_set():
            self._producer.poll(0.1)
        if self._stop.is_set():
            return  # close() settles the chunk after its flush
        with self._lock:
            self._settle_chunk(chunk)

    def _settle_chunk(self, chunk: DrainChunk) -> None:
        """Move the cursor past the acknowledged prefix; back off if anything failed."""
        end, count = chunk.acked_prefix()
        if count:
            try:
                self._spool.advance(end, count)
            except OSError:
                log.exception("cannot store the spool cursor; these events will be resent")
            self._metrics.set_spool_depth(self._spool.depth)
        self._chunk = None
        if chunk.complete:
            self._backoff = self._backoff_min
            self._probe_first = False
            self._next_retry = 0.0
        else:
            self._retry_later()

    def _retry_later(self) -> None:
        self._probe_first = True
        self._next_retry = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self._backoff_max)

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
        self._purge_and_collect(old)
        with self._lock:
            if self._chunk is not None:
                self._settle_chunk(self._chunk)
            self._pending.abandon_in_flight()
            self._enter_spooling("the producer hit a fatal error")
            self._release()
            self._producer = self._factory(self._config)
            self._fatal = False
        log.warning("producer recreated after a fatal error")

    def _purge_and_collect(self, producer: ProducerLike) -> None:
        """Purge what is queued or in flight and serve the resulting delivery reports."""
        producer.purge(in_queue=True, in_flight=True, blocking=True)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            producer.poll(0.05)
            with self._lock:
                if not self._pending.in_flight and (self._chunk is None or not self._chunk.pending):
                    return

    def _sync_spool(self) -> None:
        now = time.monotonic()
        if now - self._last_sync < 1.0:
            return
        self._last_sync = now
        with self._lock:
            try:
                self._spool.sync()
            except OSError:
                log.exception("cannot fsync the spool %s", self._spool.path)


def _close_at_exit(ref: weakref.ref[Publisher]) -> None:
    """At interpreter exit, close a publisher the agent forgot to close (nothing is lost)."""
    publisher = ref()
    if publisher is not None:
        publisher.close(timeout=5.0)
