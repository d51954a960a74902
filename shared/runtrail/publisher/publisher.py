"""The agent-side publisher: validated, redacted, sequenced events to Kafka, never raising.

An agent runtime attaches a :class:`Publisher` as a listener (``on_event``) or calls
:meth:`Publisher.publish`. Each event is checked against the limits, redacted, validated,
numbered within its (tenant, run), encoded and produced keyed by run ID. Nothing here raises
into the agent (design principle 3): invalid events are rejected (counted, logged, ``None``
returned).

This is the façade; the parts behind it each do one job:

* :mod:`~runtrail.publisher.pipeline` — envelope, prepare, validate, encode (pure, no Kafka);
* :mod:`~runtrail.publisher.ledger` — every accepted event's index and whether it is settled;
* :mod:`~runtrail.publisher.drain` — direct or draining mode, delivery reports, the resend
  from the spool, exactly once on the topic, through the producer of
  :mod:`~runtrail.publisher.sender`;
* :mod:`~runtrail.publisher.committer` — the group commit of accepted events to the
  write-ahead spool (:mod:`~runtrail.publisher.wal`), so an agent that dies loses at most the
  events of the last ``spool_commit_ms``; the next publisher on the same spool folder sends
  the rest after the recovery scan (:mod:`~runtrail.publisher.recovery`);
* :mod:`~runtrail.publisher.rejections` — any failure of one event as a counted rejection;
* :mod:`~runtrail.publisher.closing` — the order the parts stop in, nothing accepted lost.

They share one lock: sequences are taken in the order events are routed, and the ledger is
settled by delivery reports, the drain and the committer alike.
"""

from __future__ import annotations

import atexit
import functools
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtrail.config import Settings
from runtrail.events import Actor, Event, EventCodec, EventData, EventError
from runtrail.events.limits import EventLimits
from runtrail.privacy.protect import Durable, Protector, protector_from_settings
from runtrail.publisher.closing import close_parts
from runtrail.publisher.committer import SpoolCommitter
from runtrail.publisher.drain import Drain
from runtrail.publisher.ledger import Ledger
from runtrail.publisher.metrics import PublisherMetrics, PublisherStats
from runtrail.publisher.pipeline import Rejected, Validated, encode, envelope, prepare, validate
from runtrail.publisher.recovery import spooled_sequences
from runtrail.publisher.redaction import Redactor, default_redactor
from runtrail.publisher.rejections import Rejections
from runtrail.publisher.sender import ProducerFactory
from runtrail.publisher.sequencing import SequenceCounter
from runtrail.publisher.spool_record import SpoolRecord
from runtrail.publisher.submitted import Submitted
from runtrail.publisher.wal import Wal

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


__all__ = ["Publisher", "Submitted"]


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
        self._topic = topic or settings.events_topic
        self._redactor = redactor
        self._codec = EventCodec()
        self._limits = EventLimits.from_settings(settings)
        self._metrics = PublisherMetrics(registry)
        self._sequences = SequenceCounter()
        self._rejections = Rejections(self._metrics, log_rejections)
        self._closed = False
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wal = Wal.open_for(settings.spool_dir, settings.tenant, self._topic)
        # every accepted event has an index: its place in publish order, continuing the WAL's
        self._ledger = Ledger(self._wal.cursor.index, self._wal.end.index)
        try:  # unusable Kafka options raise here: the spool folder is not kept locked
            self._drain = Drain(
                settings,
                self._topic,
                self._wal,
                self._ledger,
                self._metrics,
                self._lock,
                self._stop,
                producer_overrides=producer_overrides,
                producer_factory=producer_factory,
                retry_backoff_s=retry_backoff_s,
                retry_backoff_max_s=retry_backoff_max_s,
                drain_chunk=drain_chunk,
            )
        except BaseException:
            self._wal.close()
            raise
        self._committer = SpoolCommitter(
            self._wal,
            self._ledger,
            self._lock,
            self._stop,
            settings.spool_commit_ms,
            f"runtrail-spool[{self._topic}]",
            sync_content=self._protect.sync if isinstance(self._protect, Durable) else None,
            serve_reports=self._drain.serve_reports,
        )
        self._metrics.set_spool_depth(self._wal.depth)
        if self._drain.draining:
            self._sequences.hold(spooled_sequences(self._wal))
        self._drain.start()
        self._committer.start()
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
        return self._committer.durable_before_ns

    def wait_durable(self, accepted_ns: int, timeout: float = 5.0) -> bool:
        """Wait (bounded) until every event accepted before ``accepted_ns`` (a
        ``time.monotonic_ns()`` time) is in the spool on disk: True once it is (it survives a
        SIGKILL), False at the timeout."""
        return self._committer.wait_durable(accepted_ns, timeout)

    @property
    def spool_path(self) -> str:
        """The write-ahead spool folder this publisher owns."""
        return str(self._wal.folder)

    @property
    def refused(self) -> str | None:
        """Why the broker refuses this publisher's credentials (None: it does not, or not yet)."""
        return self._drain.refused

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
            return self._rejections.reject(exc.reason, str(exc)).event_id
        except Exception as exc:
            return self._rejections.reject(
                "invalid-event", f"cannot build the envelope: {exc}"
            ).event_id
        return self.submit(form, trace_context=trace_context).event_id

    def submit(
        self, event: Event | Mapping[str, Any], *, trace_context: Mapping[str, str] | None = None
    ) -> Submitted:
        """Like :meth:`on_event`, but says why an event was rejected. Never raises."""
        try:
            if self._closed:
                return self._rejections.reject("closed", "the publisher is closed")
            form = prepare(event, self._limits, self._settings.tenant, self._redactor)
            if self._protect is not None:
                form = self._protect(form)
            return self._enqueue(validate(form), trace_context)
        except Exception as exc:  # never into the agent
            return self._rejections.of(exc)

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
                self._drain.route(record)
                self._committer.add(record)
            return Submitted(record.event_id)
        except Exception as exc:  # never into the caller
            return self._rejections.of(exc)

    def set_next_sequence(
        self, run_id: str, next_sequence: int, *, tenant_id: str | None = None
    ) -> None:
        """Continue ``run_id`` of ``tenant_id`` (default: this publisher's tenant) at
        ``next_sequence`` (a run resumed in a new process)."""
        tenant = tenant_id if tenant_id is not None else self._settings.tenant
        self._sequences.set_next(tenant, run_id, next_sequence)

    def next_sequence(self, run_id: str, *, tenant_id: str | None = None) -> int:
        """The sequence the next event of ``run_id`` takes here: what a run that stops (waits
        for input) records, so the process that resumes it continues at that number."""
        tenant = tenant_id if tenant_id is not None else self._settings.tenant
        return self._sequences.peek(tenant, run_id)

    def forget_run(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """Drop a finished run's sequence counter."""
        tenant = tenant_id if tenant_id is not None else self._settings.tenant
        self._sequences.forget(tenant, run_id)

    def flush(self, timeout: float = 10.0) -> int:
        """Wait until every event so far is acknowledged or in the spool; how many are not."""
        left = self._drain.wait_delivered(timeout)
        self._committer.commit()
        return left

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait (bounded) until the spool is empty and the publisher is back in direct mode."""
        return self._drain.wait_drained(timeout)

    def sync(self) -> None:
        """Write and fsync every accepted event to the spool now (instead of at the next
        group commit): after it returns, they survive this process."""
        self._committer.commit()

    def close(self, timeout: float = 10.0) -> None:
        """Flush, or drain the spool while it is being sent (bounded by ``timeout``); what is
        still unconfirmed stays in the spool for the next publisher on the same folder.
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._atexit)
        close_parts(
            self._drain,
            self._committer,
            self._wal,
            self._ledger,
            self._metrics,
            self._lock,
            self._stop,
            timeout,
        )

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def acked_offsets(self) -> dict[int, int]:
        """Per partition of the topic, the highest offset the broker acknowledged to us."""
        with self._lock:
            return self._drain.acked_offsets()

    def stats(self) -> PublisherStats:
        with self._lock:
            draining = self._drain.draining
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
            self._drain.route(record)
            self._committer.add(record)
            self._sequences.commit(tenant, run, sequence)
        return Submitted(event.event_id)


def _close_at_exit(ref: weakref.ref[Publisher]) -> None:
    """At interpreter exit, close a publisher the agent forgot to close (nothing is lost)."""
    publisher = ref()
    if publisher is not None:
        publisher.close(timeout=5.0)
