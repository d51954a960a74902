"""Cyclic-GC settings for a service process's consume loop.

Why: a consume loop keeps a batch (thousands of events, each a few dozen objects) alive
while it allocates the next, so with CPython's default threshold (700 allocations) the young
generation is collected every few events and the older ones are traversed again and again,
for garbage that is almost all freed by reference counting anyway. Objects made at start-up
(modules, schemas, validators) are frozen out of collection altogether.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: allocations between young-generation collections while a service runs
SERVICE_GC_THRESHOLD = 50_000


@contextmanager
def service_gc(threshold: int = SERVICE_GC_THRESHOLD) -> Iterator[None]:
    """Freeze what exists, raise the young-generation threshold; restore both on exit."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, previous[1], previous[2])
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
