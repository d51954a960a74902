"""Cyclic-GC settings for a service process's consume loop: collections paced by flushes.

Why: a consume loop keeps work alive until its flush (a batch of events, the audit service's
links, capture's records: thousands of objects each), and a young-generation collection
traverses every tracked object allocated since the last one that is still alive. With
allocation-triggered collections that is the pending work, over and over, only to promote
it: in the audit service they took a tenth of the run and freed about a thousand objects
in 100,000 events. Right after a flush that work is gone, so a collection there traverses
little. :class:`FlushPacedGc` collects the young generation after every flush, and the older
ones when as many of those have accumulated as CPython's own thresholds would wait for;
automatic collections stay on with a high threshold, a ceiling for a burst of garbage
between flushes. Objects made at start-up (modules, schemas, validators) are frozen out of
collection altogether.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: net allocations of tracked objects between automatic young collections while a service
#: runs: a ceiling only, the flushes normally collect long before it
SERVICE_GC_CEILING = 1_000_000


class FlushPacedGc:
    """Collects after each flush: the young generation every time, the older ones when
    their counts reach the thresholds in force before (CPython's 10 and 10 by default)."""

    def __init__(self, older_thresholds: tuple[int, int]) -> None:
        self._older = older_thresholds

    def after_flush(self) -> None:
        """A flush just released its work: collect while little of it is alive."""
        _, young_collections, older_collections = gc.get_count()
        if young_collections < self._older[0]:
            gc.collect(0)
        elif older_collections < self._older[1]:
            gc.collect(1)
        else:
            gc.collect(2)


@contextmanager
def service_gc(ceiling: int = SERVICE_GC_CEILING) -> Iterator[FlushPacedGc]:
    """Freeze what exists, raise the automatic threshold to ``ceiling``; restore on exit."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(ceiling, previous[1], previous[2])
    try:
        yield FlushPacedGc((previous[1], previous[2]))
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
