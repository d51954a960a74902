"""The consume loop's cyclic GC: collections paced by flushes, garbage still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runtrail.runtime.gc_tuning import SERVICE_GC_CEILING, service_gc


class _Node:
    def __init__(self) -> None:
        self.me: Any = self  # a cycle: only the cyclic GC frees it


@contextmanager
def _collections() -> Iterator[list[int]]:
    """The generations collected meanwhile, in order."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)


def test_no_automatic_collection_below_the_ceiling_while_work_piles_up() -> None:
    with service_gc() as paced, _collections() as seen:
        assert gc.get_threshold()[0] == SERVICE_GC_CEILING
        pending = [[index] for index in range(50_000)]  # a flush interval's live work
        assert seen == []  # CPython's default would have collected some 70 times
        del pending
        paced.after_flush()
    assert seen == [0]


def test_cyclic_garbage_is_collected_at_the_next_flush() -> None:
    with service_gc() as paced:
        node = _Node()
        gone = weakref.ref(node)
        del node
        assert gone() is not None  # a cycle: reference counting alone keeps it
        paced.after_flush()
        assert gone() is None


def test_older_generations_are_collected_as_often_as_the_thresholds_said() -> None:
    previous = gc.get_threshold()
    with service_gc() as paced, _collections() as seen:
        # each older collection comes after as many young ones as its threshold says
        for _ in range((previous[1] + 1) * previous[2] + previous[1] + 1):
            paced.after_flush()
    assert seen.count(2) == 1  # a full collection once the older counts were reached
    assert seen.count(1) == previous[2]
    assert gc.get_threshold() == previous  # and the thresholds are restored on the way out


def test_a_cycle_surviving_one_flush_is_collected_by_an_older_one() -> None:
    with service_gc() as paced:
        node = _Node()
        gone = weakref.ref(node)
        paced.after_flush()  # alive at this flush: promoted to an older generation
        del node
        for _ in range(gc.get_threshold()[1] + 1):
            paced.after_flush()
        assert gone() is None


# --- a service that keeps its state (Service.keeps_state) -------------------------------------


def test_kept_state_is_frozen_at_each_flush_not_traversed() -> None:
    with service_gc(freeze_survivors=True) as paced, _collections() as seen:
        state = [[index] for index in range(1_000)]  # what the service keeps
        frozen = gc.get_freeze_count()
        paced.after_flush()
        assert seen == []  # nothing traversed at an ordinary flush
        assert gc.get_freeze_count() >= frozen + len(state)
        assert gc.get_count()[0] < len(state)  # out of the young generation


def test_a_cycle_dropped_is_freed_by_the_full_collection_at_the_older_cadence() -> None:
    previous = gc.get_threshold()
    with service_gc(freeze_survivors=True) as paced, _collections() as seen:
        node = _Node()
        gone = weakref.ref(node)
        paced.after_flush()  # alive at this flush: frozen with the state
        del node
        for _ in range(previous[1] * previous[2] - 2):
            paced.after_flush()
        assert gone() is not None  # frozen: no collection has seen it yet
        paced.after_flush()  # the full collection's turn
        assert gone() is None
        assert seen == [2]
