"""The dead-letter limit on its own: consecutive handler errors, their share in a window of
offsets, the end of a run when the service takes an event, the hold on positions, replays
counted once, and the settings it is built from.

Property (hypothesis): for any sequence of outcomes on a partition, the limiter trips exactly
when a model that counts naively (every outcome kept in a list) says a bound is passed, and
its hold is the first handler error after the last event taken."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.config import Settings
from runtrail.runtime import Delivered, Partition
from runtrail.runtime.dlq_limit import CONSECUTIVE, RATIO, DlqLimit, DlqLimiter
from tests.examples import examples

A: Partition = ("events", 0)
B: Partition = ("events", 1)


def _fail_all(limiter: DlqLimiter, tp: Partition, offsets: range) -> list[Any]:
    return [limiter.failed(tp, o) for o in offsets]


def test_the_run_after_max_consecutive_handler_errors_trips() -> None:
    limiter = DlqLimiter(DlqLimit(max_consecutive=3, max_ratio=0))
    assert _fail_all(limiter, A, range(10, 13)) == [None, None, None]
    trip = limiter.failed(A, 13)
    assert trip is not None
    assert (trip.bound, trip.first_offset, trip.offset, trip.count, trip.limit) == (
        CONSECUTIVE,
        10,
        13,
        4,
        3,
    )
    assert "4 handler errors in a row (limit 3)" in trip.describe()


def test_an_event_taken_ends_the_run_and_partitions_count_apart() -> None:
    limiter = DlqLimiter(DlqLimit(max_consecutive=2, max_ratio=0))
    assert _fail_all(limiter, A, range(0, 2)) == [None, None]
    assert limiter.failed(B, 0) is None  # another partition: its own run
    limiter.succeeded(A, 2)
    assert limiter.hold(A) is None
    assert _fail_all(limiter, A, range(3, 5)) == [None, None]
    assert limiter.hold(A) == 3
    assert limiter.failed(A, 5) is not None
    assert limiter.failed(B, 1) is None
    assert limiter.failed(B, 2) is not None


def test_a_whole_batch_taken_ends_the_runs_of_its_partitions() -> None:
    limiter = DlqLimiter(DlqLimit(max_consecutive=5, max_ratio=0))
    limiter.failed(A, 7)
    limiter.failed(B, 3)
    limiter.succeeded_batch([_delivered(A, 8), _delivered(A, 9)])
    assert limiter.hold(A) is None
    assert limiter.hold(B) == 3  # not in the batch: its run stays open


def test_the_ratio_counts_handler_errors_among_the_last_offsets() -> None:
    # at most 2 in the last 10 offsets; not consecutive (an event taken between each)
    limiter = DlqLimiter(DlqLimit(max_consecutive=0, max_ratio=0.2, ratio_window=10))
    assert limiter.failed(A, 0) is None
    limiter.succeeded(A, 1)
    assert limiter.failed(A, 5) is None
    limiter.succeeded(A, 6)
    trip = limiter.failed(A, 9)  # 0, 5 and 9 in the window (0..9)
    assert trip is not None and trip.bound == RATIO
    assert (trip.first_offset, trip.count, trip.limit, trip.window) == (9, 3, 2, 10)
    assert "3 handler errors among its last 10 offsets (limit 2)" in trip.describe()


def test_errors_that_left_the_window_no_longer_count() -> None:
    limiter = DlqLimiter(DlqLimit(max_consecutive=0, max_ratio=0.2, ratio_window=10))
    for offset in (0, 5, 10, 15, 20):  # never more than 2 in any 10 offsets
        assert limiter.failed(A, offset) is None
        limiter.succeeded(A, offset + 1)
    assert limiter.hold(A) is None
    assert limiter.failed(A, 26) is None  # 15 left the window (17..26): 20 and 26 remain
    limiter.succeeded(A, 27)
    assert limiter.failed(A, 28) is not None  # 20, 26, 28


def test_a_partition_with_nothing_to_remember_is_dropped() -> None:
    limiter = DlqLimiter(DlqLimit(max_consecutive=3, max_ratio=0.5, ratio_window=4))
    limiter.failed(A, 0)
    limiter.succeeded(A, 1)
    assert limiter.counting  # 0 is still in the window
    limiter.succeeded(A, 4)
    assert not limiter.counting


def test_positions_stay_at_the_first_error_of_an_open_run() -> None:
    limiter = DlqLimiter(DlqLimit(max_consecutive=10))
    limiter.failed(A, 4)
    limiter.failed(A, 5)
    positions = {A: 9, B: 3}
    limiter.cap(positions)
    assert positions == {A: 4, B: 3}
    limiter.succeeded(A, 9)
    positions = {A: 10}
    limiter.cap(positions)
    assert positions == {A: 10}


def test_offsets_counted_before_are_not_counted_again() -> None:
    """A batch consumed again (after StoreUnavailable) reports the same outcomes again."""
    limiter = DlqLimiter(DlqLimit(max_consecutive=2, max_ratio=0))
    assert _fail_all(limiter, A, range(0, 2)) == [None, None]
    limiter.succeeded(A, 0)  # replayed: older than what was counted, it ends nothing
    assert _fail_all(limiter, A, range(0, 2)) == [None, None]
    assert limiter.hold(A) == 0
    assert limiter.failed(A, 2) is not None


def test_forgotten_partitions_start_afresh() -> None:
    limiter = DlqLimiter(DlqLimit(max_consecutive=1, max_ratio=0))
    limiter.failed(A, 0)
    limiter.forget([A])
    assert limiter.hold(A) is None
    assert limiter.failed(A, 1) is None


def test_zero_switches_a_bound_off_and_both_off_holds_nothing() -> None:
    off = DlqLimiter(DlqLimit(max_consecutive=0, max_ratio=0, ratio_window=0))
    assert _fail_all(off, A, range(1000)) == [None] * 1000
    assert off.hold(A) is None and not off.counting
    no_window = DlqLimit(max_consecutive=0, max_ratio=0.5, ratio_window=0)
    assert no_window.max_in_window is None and not no_window.enabled
    assert DlqLimit(max_ratio=1.0).max_in_window is None


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        DlqLimit(max_consecutive=-1)
    with pytest.raises(ValueError):
        DlqLimit(max_ratio=1.5)


def test_the_settings_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DlqLimit.from_settings(Settings()) == DlqLimit(100, 0.5, 1000)
    monkeypatch.setenv("RUNTRAIL_DLQ_MAX_CONSECUTIVE", "7")
    monkeypatch.setenv("RUNTRAIL_DLQ_MAX_RATIO", "0.1")
    monkeypatch.setenv("RUNTRAIL_DLQ_RATIO_WINDOW", "0")
    limit = DlqLimit.from_settings(Settings())
    assert limit == DlqLimit(7, 0.1, 0)
    assert limit.max_in_window is None and limit.enabled


# --- property: the limiter agrees with a naive model --------------------------------------


def _model(outcomes: list[bool], limit: DlqLimit) -> tuple[int | None, int | None]:
    """(index that trips, hold before it) by keeping every outcome: True = handler error."""
    for index in range(len(outcomes)):
        if not outcomes[index]:
            continue
        run = 0
        while index - run >= 0 and outcomes[index - run]:
            run += 1
        start = index - run + 1
        if limit.max_consecutive and run > limit.max_consecutive:
            return index, start
        cap = limit.max_in_window
        if cap is not None:
            low = index - limit.ratio_window + 1
            if sum(outcomes[max(0, low) : index + 1]) > cap:
                return index, start
    return None, None


@settings(max_examples=examples(300), deadline=None)
@given(
    outcomes=st.lists(st.booleans(), max_size=120),
    consecutive=st.integers(0, 8),
    ratio=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]),
    window=st.integers(0, 30),
)
def test_the_limiter_trips_where_a_naive_count_says(
    outcomes: list[bool], consecutive: int, ratio: float, window: int
) -> None:
    limit = DlqLimit(max_consecutive=consecutive, max_ratio=ratio, ratio_window=window)
    limiter = DlqLimiter(limit)
    expected, hold = _model(outcomes, limit)
    tripped = None
    for offset, failed in enumerate(outcomes):
        if failed:
            trip = limiter.failed(A, offset)
            if trip is not None:
                tripped = offset
                assert trip.first_offset == hold
                assert limiter.hold(A) == hold
                break
        else:
            limiter.succeeded(A, offset)
        # the hold is the first error after the last event taken, while the run is open
        run_open = limit.enabled and failed
        if run_open:
            first = offset
            while first > 0 and outcomes[first - 1]:
                first -= 1
            assert limiter.hold(A) == first
        else:
            assert limiter.hold(A) is None
    assert tripped == expected


def _delivered(tp: Partition, offset: int) -> Delivered:
    return Delivered(None, None, tp[0], tp[1], offset, 0, None)  # type: ignore[arg-type]
