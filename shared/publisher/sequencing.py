"""Per-run sequence numbers, assigned by the publisher (1, 2, 3… per run).

Consumers check the envelope's ``sequence`` to detect gaps and duplicates, so the publisher is
the one place that numbers a run's events. An event that already carries a sequence keeps it
and the counter moves past it; a resumed run continues with :meth:`set_next`.
"""

from __future__ import annotations

import threading


class SequenceCounter:
    """Thread-safe next-sequence per run ID; ``peek`` then ``commit`` so a rejected event uses none."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def peek(self, run_id: str) -> int:
        """The sequence the next event of ``run_id`` will get."""
        with self._lock:
            return self._next.get(run_id, 1)

    def commit(self, run_id: str, used: int) -> None:
        """Record that ``used`` was given to an event of ``run_id``; the counter moves past it."""
        with self._lock:
            if used + 1 > self._next.get(run_id, 1):
                self._next[run_id] = used + 1

    def set_next(self, run_id: str, next_sequence: int) -> None:
        """Continue ``run_id`` at ``next_sequence`` (e.g. a run resumed after a restart)."""
        if next_sequence < 1:
            raise ValueError("sequences start at 1")
        with self._lock:
            self._next[run_id] = next_sequence

    def forget(self, run_id: str) -> None:
        """Drop a finished run's counter (a long-lived process would otherwise keep them all)."""
        with self._lock:
            self._next.pop(run_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._next)
