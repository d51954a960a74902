"""What ``offsets set`` plans, before anything is written: targets, ends of the log, where a
shift starts from for each kind of service."""

from __future__ import annotations

import pytest

from runtrail_tools.offsets.group import OffsetsError, Watermarks
from runtrail_tools.offsets.plan import Target, current_position, parse_time, plan_moves

MARKS = {0: Watermarks(10, 100), 1: Watermarks(0, 5)}


def _to(target: Target, **kw: object) -> dict[int, int]:
    moves = plan_moves(
        target, [0, 1], MARKS, kw.get("committed", {}), kw.get("stored"), kw.get("by_time")
    )  # type: ignore[arg-type]
    return {m.partition: m.to for m in moves}


def test_targets() -> None:
    assert _to(Target("earliest")) == {0: 10, 1: 0}
    assert _to(Target("latest")) == {0: 100, 1: 5}
    assert _to(Target("time", 0), by_time={0: 42, 1: -1}) == {0: 42, 1: 5}  # none after: end
    with pytest.raises(OffsetsError, match=r"offset 50 is outside partition 1's log \[0, 5\]"):
        _to(Target("offset", 50))
    with pytest.raises(OffsetsError, match="outside partition 0"):
        _to(Target("offset", 3))  # below the log start of partition 0


def test_shift_starts_where_the_service_would_and_stops_at_the_ends() -> None:
    moves = plan_moves(Target("shift", -20), [0, 1], MARKS, {0: 25, 1: 4}, None)
    assert [(m.to, m.note) for m in moves] == [
        (10, "stopped at the log start"),
        (0, "stopped at the log start"),
    ]
    moves = plan_moves(Target("shift", 3), [0], MARKS, {0: 25}, {0: 40})
    assert moves[0].to == 43  # the store's position wins over the group's
    with pytest.raises(OffsetsError, match="partition 1 has no position in its store"):
        plan_moves(Target("shift", 1), [1], MARKS, {1: 2}, {}, falls_back_to_group=False)
    assert (
        plan_moves(Target("shift", 1), [1], MARKS, {1: 2}, {}, falls_back_to_group=True)[0].to == 3
    )


def test_current_position() -> None:
    assert current_position(0, {0: 7}, None, True) == 7  # store-less: the group
    assert current_position(0, {0: 7}, {0: 9}, False) == 9
    assert current_position(0, {0: 7}, {}, False) is None  # audit/projector: from the beginning
    assert current_position(0, {0: 7}, {}, True) == 7  # resume-cache: the group's
    assert current_position(0, {}, {0: -2}, False) is None


def test_parse_time() -> None:
    assert parse_time("1970-01-01T00:00:01Z") == 1000
    assert parse_time("1970-01-01T00:00:01") == 1000  # naive: UTC
    assert parse_time("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(OffsetsError, match="ISO 8601"):
        parse_time("yesterday")
