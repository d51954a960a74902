"""The publisher's way to the broker: direct or draining mode, delivery reports, the resend.

Delivery modes:

* **direct** — events are produced straight to Kafka as they are accepted;
* **draining** — entered on the first failed delivery, when no acknowledgement arrives for
  ``delivery_timeout_ms``, when the local queue stays full, or when a non-empty spool is found
  at start. At that moment everything still queued or in flight in librdkafka is purged (so no
  later event of a run can overtake an earlier one), later events are only written to the
  spool, and a background thread resends the spool in order, in chunks, from the first event
  not acknowledged. It returns to direct mode only once every accepted event is settled.

A broker's "message too large" is final only for an event sent alone. A topic whose
``max.message.bytes`` is below the publisher's limit refuses a whole produce batch, and every
event in it gets the error; each is resent from the spool in a chunk of its own, and only one
refused again is rejected (counted ``rejected``, logged).

Exactly once on the topic: events whose fate is unknown (purged while in flight, or found
beyond the cursor at start) are looked up on the topic by eventId before they are resent
(:mod:`runtrail.publisher.recovery`), so a resend never doubles what the broker already
holds. Consumers still drop same-eventId duplicates, for the one case left: a request the
broker received before the outage but wrote only after that check.

A client that has lost every broker for good (:mod:`runtrail.kafka.orphan_watch`: a
librdkafka client was seen to drop its last broker during a broker's stop without a
re-bootstrap, and then never reaches the cluster again by itself) is replaced, while the spool
waits, by a new one that bootstraps from ``bootstrap.servers`` again. Nothing is in flight then
(the spool is the only copy being resent), so nothing is lost or doubled.

Every method runs under the publisher's lock or takes it; the ledger it settles is the
publisher's, shared with the spool committer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from runtrail.config import Settings
from runtrail.kafka.durability import CHECK_TIMEOUT_S, start_durability_check
from runtrail.kafka.fatal import is_fatal
from runtrail.kafka.producer_config import purged, too_large
from runtrail.kafka.retry import Backoff
from runtrail.kafka.unacked import SizeSuspects
from runtrail.publisher.inflight import InFlight
from runtrail.publisher.ledger import Ledger
from runtrail.publisher.metrics import PublisherMetrics
from runtrail.publisher.pipeline import Rejected
from runtrail.publisher.recovery import Unconfirmed
from runtrail.publisher.sender import PERMANENT_ERRORS, ProducerFactory, Sender
from runtrail.publisher.spool_record import SpoolRecord
from runtrail.publisher.wal import Wal, WalEntry

log = logging.getLogger(__name__)


def _never() -> bool:
    return False


def _is_permanent(err: KafkaError) -> bool:
    return err.code() in PERMANENT_ERRORS


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None


class Drain:
    """The delivery mode, the events in flight, and the thread that serves their reports
    and resends the spool through the :class:`~runtrail.publisher.sender.Sender`."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        wal: Wal,
        ledger: Ledger,
        metrics: PublisherMetrics,
        lock: threading.RLock,
        stop: threading.Event,
        *,
        producer_overrides: Mapping[str, Any] | None,
        producer_factory: ProducerFactory | None,
        retry_backoff_s: float,
        retry_backoff_max_s: float,
        drain_chunk: int,
    ) -> None:
        self._wal = wal
        self._ledger = ledger
        self._metrics = metrics
        self._lock = lock
        self._stop = stop
        self._acked: dict[int, int] = {}
        self._backoff = Backoff(retry_backoff_s, max(retry_backoff_max_s, retry_backoff_s))
        self._drain_chunk = max(1, drain_chunk)
        self._timeout_s = settings.delivery_timeout_ms / 1000
        self._max_block_s = settings.publish_max_block_ms / 1000
        self._next_retry = 0.0
        self._warned_failure = False
        self._purge_wanted = False
        #: reports that found the lock taken, for the holder or the next poll (:meth:`_on_report`)
        self._deferred: deque[tuple[KafkaError | None, Any]] = deque()
        self._sender = Sender(
            settings, topic, self._on_report, wal.folder, producer_overrides, producer_factory
        )

        #: events the broker refused as too large in a batch: resent alone before judged
        #: (only the drain sends them; cleared when it ends, so acks pay nothing for it)
        self._size_suspects = SizeSuspects()
        self._inflight = InFlight()  # handed to librdkafka, no report yet
        self._unconfirmed = Unconfirmed(settings, topic, wal, lock)
        #: every accepted event goes through the spool (see the module docstring)
        self.draining = wal.depth > 0
        self._probe_first = self.draining
        self._progress = (ledger.first_unsettled, time.monotonic())
        #: set when the thread has work: events still in flight at a group commit (see
        #: :meth:`serve_reports`), draining entered, or close
        self._to_poll = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"runtrail-publisher[{topic}]", daemon=True
        )
        # a replicated events topic acknowledging one copy is said at start, never waited for
        self._durability = (
            start_durability_check(settings, [topic], "publisher")
            if producer_factory is None
            else None
        )
        if self.draining:
            log.info(
                "found %d unconfirmed events in %s; sending them before new ones",
                wal.depth,
                wal.folder,
            )

    # --- what the publisher asks -----------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wake the thread (the stop event is set) and wait for it, and the durability check."""
        self._to_poll.set()
        self._thread.join(timeout=timeout)
        if self._durability is not None:
            self._durability.join(timeout=CHECK_TIMEOUT_S)

    def wait_delivered(self, timeout: float, interrupted: Callable[[], bool] = _never) -> int:
        """Serve reports (bounded) until nothing is in flight, or ``interrupted()``; how many
        still are."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                left = len(self._inflight)
            remaining = deadline - time.monotonic()
            if left == 0 or remaining <= 0 or interrupted():
                return left
            self._poll(min(remaining, 0.05))

    def wait_drained(self, timeout: float) -> bool:
        """Wait (bounded) until the spool is sent and direct mode is back."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                done = not self.draining and not self._inflight
            if done or time.monotonic() >= deadline or not self._thread.is_alive():
                return done
            time.sleep(0.05)

    def acked_offsets(self) -> dict[int, int]:
        """Per partition, the highest offset the broker acknowledged (caller holds the lock)."""
        return dict(self._acked)

    @property
    def refused(self) -> str | None:
        """Why the broker refuses this publisher's credentials (None: it does not, or not yet)."""
        return self._sender.refused

    def collect(self) -> None:
        """Take back everything queued or in flight, and serve the resulting reports."""
        self._purge_and_collect()

    def leave_in_spool(self) -> None:
        """At close (caller holds the lock): what stays unreported, and the spool from the
        first unsettled event, is left for the next publisher on the same folder."""
        self._settle_deferred()  # reports that came last settle their events first
        if self._inflight:
            log.warning("%d events unconfirmed at close stay in the spool", len(self._inflight))
            self._inflight.clear()
        if self._ledger.pending:
            self.draining = True

    # --- routing an accepted event (caller holds the lock) -----------------------------------
    def route(self, record: SpoolRecord) -> None:
        """Give the record its index and, in direct mode, produce it; the spool gets it from
        the committer either way."""
        index = self._ledger.next_index  # taken below, once the record is certainly kept
        if not self.draining:
            try:
                if self._produce_with_backpressure(record):
                    self._inflight.add(index, record.key, record.value)
                else:
                    self._enter_draining("the local producer queue stays full")
            except KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and _is_permanent(err):
                    raise Rejected("refused-by-producer", err.str()) from exc
                self._enter_draining(f"produce failed: {exc}")
        if self.draining:
            self._metrics.count("spooled")
        self._ledger.take()

    def serve_reports(self) -> None:
        """Serve the delivery reports that came, and wake the thread for the events still in
        flight. The spool committer calls it at each group commit, before it takes its batch:
        at an agent's pace an event's acknowledgement usually comes within ``linger.ms``, so it
        is served here, its batch needs no fsync, and this thread is never woken for it (one
        thread woken per event, not two)."""
        self._poll(0)
        with self._lock:
            if self._inflight:
                self._to_poll.set()

    def _produce_with_backpressure(self, record: SpoolRecord) -> bool:
        """A full local queue means the broker is slower than the agent, not gone: wait up to
        ``publish_max_block_ms`` for room (serving delivery reports meanwhile). False: give
        up, the event waits in the spool rather than the agent stalling for long."""
        deadline = 0.0
        while True:
            try:
                self._sender.produce(record)
                return True
            except BufferError:
                now = time.monotonic()
                if not deadline:
                    deadline = now + self._max_block_s
                elif now >= deadline:
                    return False
                self._poll(0.005)
                if self.draining:  # a report served meanwhile failed: this one must wait too
                    return False

    def _enter_draining(self, why: str, purge: bool = False) -> None:
        """Stop producing directly; what is unconfirmed may be on the topic (look first)."""
        if not self.draining:
            self.draining = True
            self._metrics.count("spooled", self._ledger.pending)
            log.warning("events go through the spool %s: %s", self._wal.folder, why)
        self._unconfirmed.widen(self._ledger.next_index)
        self._probe_first = True
        self._next_retry = time.monotonic() + self._backoff.delay()
        if purge:
            self._purge_wanted = True
        self._to_poll.set()

    # --- delivery reports (called from poll, in whichever thread polled) ---------------------
    def _poll(self, timeout: float) -> None:
        """Serve delivery reports for up to ``timeout`` seconds, then those left for later."""
        self._sender.poll(timeout)
        if self._deferred:
            with self._lock:
                self._settle_deferred()

    def _on_report(self, err: KafkaError | None, msg: Any) -> None:
        """The client's delivery callback. A report that finds the lock held by another
        thread is left for it (or the next poll) instead of waiting: librdkafka frees a
        batch's messages only once all its reports returned, and an agent waiting for room
        in a full queue holds the lock while it serves reports, so a report waiting for the
        lock kept the queue full for as long as the agent waited (the events then went
        through the spool, ``tests/test_publisher_full_queue.py``)."""
        if not self._lock.acquire(blocking=False):
            self._deferred.append((err, msg))
            return
        try:
            self._settle_deferred()
            self._report(err, msg)
        finally:
            self._lock.release()

    def _settle_deferred(self) -> None:
        """The reports left for later, in the order they came (caller holds the lock)."""
        while self._deferred:
            self._report(*self._deferred.popleft())

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        """One delivery report (caller holds the lock)."""
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
            if purged(err):
                self._metrics.delivery_error()  # taken back: resent from the spool
            else:
                self._delivery_failed(err)
            # nothing queued behind it may go first: purge and resend from the spool
            self._enter_draining(f"delivery failed: {err.str()}", purge=True)

    def _note_ack(self, msg: Any) -> None:
        partition, offset = msg.partition(), msg.offset()
        if partition is not None and offset is not None and offset > self._acked.get(partition, -1):
            self._acked[partition] = offset
        self._metrics.count("sent")

    def _delivery_failed(self, err: KafkaError) -> None:
        self._metrics.delivery_error()
        if is_fatal(err):
            self._sender.fatal = True
        level = logging.DEBUG if self._warned_failure else logging.WARNING
        self._warned_failure = True
        log.log(level, "delivery failed: %s", err.str())

    # --- the background thread ------------------------------------------------------------
    def _run(self) -> None:
        """Serve delivery callbacks; purge on failure; resend the spool; recover fatal errors."""
        while not self._stop.is_set():
            try:
                with self._lock:
                    idle = not (
                        self._inflight or self.draining or self._purge_wanted or self._sender.fatal
                    )
                    if idle:
                        self._to_poll.clear()  # under the lock: serve_reports sets it after
                if idle:
                    # nothing waits for a report: no wake-ups until a group commit leaves events
                    # in flight (reports and client errors are served within the second anyway)
                    self._to_poll.wait(1.0)
                # a drain step due now must not wait for reports first: with nothing in flight
                # between two chunks the wait was the whole timeout, 50 ms a chunk
                self._poll(0 if self._drain_due() else 0.05)
                if self._purge_wanted:
                    self._purge_and_collect()
                if self._sender.fatal:
                    self._recreate_producer()
                self._check_stall()
                if self._drain_due():
                    self._drain_step()
            except Exception:
                log.exception("publisher background thread error")
                self._stop.wait(0.5)

    def _drain_due(self) -> bool:
        """Draining, and its next step is not held back by a retry's backoff."""
        return self.draining and time.monotonic() >= self._next_retry

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
                self.draining = False
                self._backoff.reset()
                self._warned_failure = False
                self._size_suspects.clear()  # all settled (indices are never reused)
                self._metrics.set_spool_depth(0)
                log.info("spool drained; publishing directly again")
                return
            start = self._ledger.first_unsettled
            if start >= self._wal.end.index:
                return  # not written yet: the next group commit writes it
            scan = self._unconfirmed.needs_scan(start)
        if self._probe_first and not self._sender.reachable():
            self._replace_if_orphaned()
            self._retry_later()
            return
        if scan and not self._unconfirmed.scan(start):
            self._retry_later()
            return
        entries = self._wal.read(self._wal.position_of(start), self._drain_chunk)
        if not entries:
            self._skip_unreadable(start)
            return
        produced = self._produce_chunk(entries)
        if self.wait_delivered(self._timeout_s, self._interrupted) and not self._interrupted():
            with self._lock:
                self._enter_draining(f"no acknowledgement for {self._timeout_s:g} s")
        if self._stop.is_set():
            return  # close() collects what is in flight
        if self._inflight:
            self._purge_and_collect()
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
                if self._unconfirmed.take_found(record.event_id):
                    self._ledger.settle(index)
                    self._metrics.count("recovered")
                    continue
                alone = index in self._size_suspects
                if alone and produced:
                    break  # a suspect goes in a chunk of its own: the next one
                try:
                    self._sender.produce(record)
                except BufferError:
                    break
                except KafkaException as exc:
                    err = _kafka_error(exc)
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

    def _interrupted(self) -> bool:
        """A chunk's wait ends early at close or when a report asked for a purge."""
        return self._stop.is_set() or self._purge_wanted

    def _replace_if_orphaned(self) -> None:
        """A probe failed: a client that has lost every broker for good gets a successor
        (only the drain produces now, and nothing is in flight)."""
        now = time.monotonic()
        if not self._sender.orphan.orphaned(now):
            return  # an outage: the client finds the broker again by itself
        why = self._sender.orphan.describe(now)
        with self._lock:
            if self._inflight:
                return
            self._sender.recreate()
            pending = self._ledger.pending
        self._metrics.client_replaced()
        log.warning("%s; %d event(s) in the spool: a new Kafka client bootstraps", why, pending)

    def _retry_later(self) -> None:
        self._probe_first = True
        self._next_retry = time.monotonic() + self._backoff.next_delay()

    def _recreate_producer(self) -> None:
        """After a fatal error the producer never works again: what it held goes back to the
        spool (whatever reached the topic is found there before it is resent)."""
        with self._lock:
            self._enter_draining("the Kafka client hit a fatal error")
        self._purge_and_collect()
        with self._lock:
            self._inflight.clear()
            self._sender.recreate()
            pending = self._ledger.pending
        self._metrics.client_replaced()
        log.warning(
            "a new Kafka client replaces the one a fatal error ended; %d event(s) in the spool",
            pending,
        )

    def _purge_and_collect(self) -> None:
        """Take back everything queued or in flight, and serve the resulting reports."""
        self._purge_wanted = False
        self._sender.purge()
        if not self.wait_delivered(2.0):
            return
        with self._lock:
            if self._inflight:
                log.warning("%d purged events did not report; resent", len(self._inflight))
                self._inflight.clear()
