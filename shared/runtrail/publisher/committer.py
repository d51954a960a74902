"""The spool's group commit: accepted events written to the write-ahead log in batches.

Why: an event that exists only in memory is lost when the agent dies, but one fsync per event
would cost the agent more than the rest of publishing. So accepted records wait in a buffer and
a committer thread writes them ``spool_commit_ms`` after the first of a batch arrived: one
write and one fsync a batch, and an agent that dies loses at most that last interval. A batch
the broker acknowledged whole before its commit (the usual case at an agent's pace) is written
without an fsync: it survives on the broker, and the log syncs it before a cursor refers past
it. After each batch the log's cursor moves up to the ledger's first unsettled event (never
past it), and the cursor is stored about once a second. The thread sleeps while nothing is
accepted, but for moving and storing a lagging cursor once a second. Before each timed commit
it serves the delivery reports that came (``serve_reports``, the drain's), so at an agent's
pace one thread wakes per batch, not one for the commit and another for the acknowledgement.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from runtrail.publisher.ledger import Ledger
from runtrail.publisher.spool_record import SpoolRecord
from runtrail.publisher.wal import Wal

log = logging.getLogger(__name__)

#: How often a cursor that moved is stored (a lagging one only costs a longer recovery scan).
STORE_EVERY_S = 1.0


class SpoolCommitter:
    """The buffer of accepted records not yet in the log, and the thread that writes them."""

    def __init__(
        self,
        wal: Wal,
        ledger: Ledger,
        lock: threading.RLock,
        stop: threading.Event,
        commit_ms: int,
        name: str,
        sync_content: Callable[[], None] | None = None,
        serve_reports: Callable[[], None] | None = None,
    ) -> None:
        self._wal = wal
        #: serves the delivery reports due before a timed commit takes its batch
        self._serve_reports = serve_reports
        #: makes protected content durable before the events that refer to it are written
        self._sync_content = sync_content
        self._ledger = ledger
        self._lock = lock  # the publisher's: guards the buffer and the ledger
        self._stop = stop
        self._interval_s = commit_ms / 1000
        self._commit_lock = threading.Lock()  # one batch written at a time, in order
        self._buffer: list[SpoolRecord] = []  # accepted, not yet written
        self._committing = False  # a batch taken from the buffer is being written
        #: every event accepted before this time (``time.monotonic_ns``) is written and fsynced
        self._durable_before_ns = time.monotonic_ns()
        self._last_store = time.monotonic()
        #: set when there is work: the buffer got its first record, or close
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wake the thread (the stop event is set) and wait for it; close commits the rest."""
        self._wake.set()
        self._thread.join(timeout=timeout)

    def add(self, record: SpoolRecord) -> None:
        """Queue an accepted record for the next batch; the caller holds the lock."""
        if not self._buffer:
            self._wake.set()
        self._buffer.append(record)

    @property
    def durable_before_ns(self) -> int:
        """See :attr:`Publisher.durable_before_ns <runtrail.publisher.Publisher.durable_before_ns>`."""
        with self._lock:
            if not self._buffer and not self._committing:
                return time.monotonic_ns()
        return self._durable_before_ns

    def wait_durable(self, accepted_ns: int, timeout: float) -> bool:
        """Wait (bounded) until every event accepted before ``accepted_ns`` is on disk."""
        deadline = time.monotonic() + max(0.0, timeout)
        pause = self._interval_s / 4
        while self._durable_before_ns <= accepted_ns:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
        return True

    def commit(self, store: bool = False) -> None:
        """Write what was accepted since the last commit (one write, one fsync), move the
        cursor past what is settled, and store it about once a second (``store``: now)."""
        with self._commit_lock:
            with self._lock:
                started = time.monotonic_ns()  # everything accepted before it is in the batch
                batch, self._buffer = self._buffer, []
                self._committing = True
                # the batch holds the indices from the log's end on: all acknowledged already
                # (an agent's pace: the ack comes within linger.ms), they need no fsync
                acked = self._ledger.first_unsettled >= self._wal.end.index + len(batch)
            try:
                if batch:
                    if self._sync_content is not None:
                        self._sync_content()  # an event on disk refers to content on disk
                    self._wal.append(batch, sync=not acked)
            except OSError as exc:
                with self._lock:
                    self._buffer[:0] = batch  # kept in memory; retried next commit
                    self._committing = False
                self._wake.set()
                log.error("cannot write the spool %s: %s", self._wal.folder, exc)
                return
            with self._lock:
                self._durable_before_ns = started
                self._committing = False
                first = self._ledger.first_unsettled
            self._wal.advance(first)
            now = time.monotonic()
            if store or now - self._last_store >= STORE_EVERY_S:
                self._last_store = now
                self._wal.store_cursor()

    def _loop(self) -> None:
        """A commit ``commit_ms`` after a batch's first record; asleep while nothing is
        accepted, but for the cursor once a second while it lags."""
        while not self._stop.is_set():
            with self._lock:
                idle = self._wal.caught_up
            self._wake.wait(None if idle else STORE_EVERY_S)
            if self._stop.wait(self._interval_s):
                return  # close() commits what is left
            self._wake.clear()  # before the batch is taken: a later record sets it again
            try:
                if self._serve_reports is not None:
                    self._serve_reports()  # an acknowledged batch needs no fsync
                self.commit()
            except Exception:
                log.exception("spool commit error")
                self._stop.wait(0.5)
