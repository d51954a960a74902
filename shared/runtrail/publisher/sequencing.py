"""Per-run sequence numbers, assigned by the publisher (1, 2, 3… per tenant and run).

Consumers check the envelope's ``sequence`` per (tenantId, runId) to detect gaps and
duplicates, so the publisher numbers each (tenant, run) on its own: two tenants that happen to
use the same run ID must not share one counter, or each would see false gaps. An event that
already carries a sequence keeps it and the counter moves past it; a resumed run continues
with :meth:`set_next`. A run whose events a dead process left in the spool continues after
them (:meth:`hold`): they reach the topic first, and hold those numbers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

log = logging.getLogger(__name__)

#: A run is identified by its tenant and its run ID.
RunKey = tuple[str, str]


class SequenceCounter:
    """Thread-safe next-sequence per (tenant, run); ``peek`` then ``commit`` so a rejected
    event uses none."""

    def __init__(self) -> None:
        self._next: dict[RunKey, int] = {}
        #: per run found in the spool at start, the sequence after the last one it holds
        self._held: dict[RunKey, int] = {}
        self._lock = threading.Lock()

    def hold(self, spooled: Mapping[RunKey, int]) -> None:
        """Number the runs the spool holds after its events (``spooled``: per run, the
        sequence after the last one there), even when a resume asks for less."""
        with self._lock:
            for key, after in spooled.items():
                self._held[key] = max(after, self._held.get(key, 1))
                self._next[key] = max(after, self._next.get(key, 1))

    def peek(self, tenant_id: str, run_id: str) -> int:
        """The sequence the next event of ``(tenant_id, run_id)`` will get."""
        with self._lock:
            return self._next.get((tenant_id, run_id), 1)

    def commit(self, tenant_id: str, run_id: str, used: int) -> None:
        """Record that ``used`` was given to an event of the run; the counter moves past it."""
        key = (tenant_id, run_id)
        with self._lock:
            if used + 1 > self._next.get(key, 1):
                self._next[key] = used + 1

    def set_next(self, tenant_id: str, run_id: str, next_sequence: int) -> None:
        """Continue the run at ``next_sequence`` (e.g. a run resumed after a restart)."""
        if next_sequence < 1:
            raise ValueError("sequences start at 1")
        key = (tenant_id, run_id)
        with self._lock:
            held = self._held.get(key, 0)
            if next_sequence < held:
                log.info(
                    "run %r continues at sequence %d, not %d: the spool still holds its events "
                    "up to %d (drain() before a resume barrier lets the resume see them)",
                    run_id,
                    held,
                    next_sequence,
                    held - 1,
                )
                next_sequence = held
            self._next[key] = next_sequence

    def forget(self, tenant_id: str, run_id: str) -> None:
        """Drop a finished run's counter (a long-lived process would otherwise keep them all)."""
        with self._lock:
            self._next.pop((tenant_id, run_id), None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._next)
