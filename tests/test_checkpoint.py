"""The checkpoint, on its own: what may be committed for each partition.

Invariants (any interleaving of batches, holds, commits and confirmations, by hypothesis):
a commit point never passes a hold or the position reached; within an assignment a
partition's commit points never move back; metadata is committed only with a held offset.
Then the rules of each party: start points, the group's commit, lost partitions, watchers."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.capture import Hold
from runtrail.runtime import Partition
from runtrail.runtime.checkpoint import NOTHING_COMMITTED, Checkpoint
from tests.checkpoint_support import GroupCommits
from tests.examples import examples

A: Partition = ("events", 0)
B: Partition = ("events", 1)


def test_a_partition_without_a_hold_is_committed_at_its_position_once() -> None:
    checkpoint = Checkpoint()
    checkpoint.reached({A: 5, B: 3})
    assert checkpoint.due() == {A: (5, None), B: (3, None)}
    checkpoint.confirmed(A, 5, None)
    assert checkpoint.due() == {B: (3, None)}  # A's commit stands: nothing to send again
    checkpoint.confirmed(B, 3, "")
    assert checkpoint.due() == {}


def test_a_hold_stops_the_commit_and_carries_its_metadata() -> None:
    checkpoint = Checkpoint()
    checkpoint.reached({A: 10, B: 4})
    checkpoint.set_holds({A: Hold(7, "rtc1:2"), B: 9})  # B's hold is past its position
    assert checkpoint.due() == {A: (7, "rtc1:2"), B: (4, None)}
    checkpoint.set_holds({A: Hold(10, "rtc1:1")})  # at the position: the metadata is kept
    assert checkpoint.due() == {A: (10, "rtc1:1"), B: (4, None)}
    checkpoint.set_holds({})  # released: the position, without metadata
    assert checkpoint.due() == {A: (10, None), B: (4, None)}


def test_a_hold_below_what_was_committed_leaves_that_commit_standing() -> None:
    checkpoint = Checkpoint()
    checkpoint.reached({A: 10})
    assert checkpoint.due() == {A: (10, None)}
    checkpoint.confirmed(A, 10, None)
    checkpoint.set_holds({A: 6})
    assert checkpoint.due() == {}  # never back to 6


def test_only_limits_the_commit_to_the_revoked_partitions() -> None:
    checkpoint = Checkpoint()
    checkpoint.reached({A: 2, B: 3})
    assert checkpoint.due(only={B}) == {B: (3, None)}


def test_start_points_come_from_the_service_for_this_assignment_only() -> None:
    checkpoint = Checkpoint()
    checkpoint.assigned([A, B])
    checkpoint.start_at(A, 42)
    assert checkpoint.starts([A, B]) == {A: 42}  # B starts at the group's commit
    checkpoint.assigned([A])  # a new assignment: the service says again
    assert checkpoint.starts([A]) == {}


def test_the_groups_commit_is_read_through_the_runtime() -> None:
    group = GroupCommits({A: (12, "rtc1:3")})
    checkpoint = Checkpoint(group)
    assert checkpoint.group_commits([A, B]) == {A: (12, "rtc1:3"), B: (NOTHING_COMMITTED, None)}
    assert Checkpoint().group_commits([A]) == {A: (NOTHING_COMMITTED, None)}  # no runtime


def test_a_lost_partition_restarts_after_what_was_durable_unless_the_service_chose() -> None:
    checkpoint = Checkpoint(GroupCommits())
    checkpoint.reached({A: 8, B: 5})
    checkpoint.set_holds({B: 2})
    checkpoint.flushed()  # A durable up to 8; B held at 2, durable nowhere
    checkpoint.lost([A, B])
    assert checkpoint.position(A) is None and checkpoint.holds() == {}
    checkpoint.assigned([A, B])
    assert checkpoint.restart_points([A, B]) == {A: 8}
    assert checkpoint.restart_points([A]) == {A: 8}  # until applied
    checkpoint.restarted([A])
    assert checkpoint.restart_points([A]) == {}

    for choose in ("start_at", "group_commits"):  # the service's own choice wins
        checkpoint.reached({A: 8})
        checkpoint.flushed()
        checkpoint.lost([A])
        checkpoint.assigned([A])
        if choose == "start_at":
            checkpoint.start_at(A, 3)
        else:
            checkpoint.group_commits([A])
        assert checkpoint.restart_points([A]) == {}, choose


def test_a_revoked_partition_is_forgotten_and_not_a_restart_point() -> None:
    checkpoint = Checkpoint()
    checkpoint.reached({A: 8})
    checkpoint.flushed()
    checkpoint.due()
    checkpoint.confirmed(A, 8, None)
    checkpoint.revoked([A])
    checkpoint.assigned([A])
    assert checkpoint.restart_points([A]) == {}
    checkpoint.reached({A: 8})  # the same offset in a new assignment is committed again
    assert checkpoint.due() == {A: (8, None)}


def test_watchers_hear_each_batch_and_positions_are_readable() -> None:
    checkpoint = Checkpoint()
    heard: list[dict[Partition, int]] = []
    checkpoint.watch(lambda positions: heard.append(dict(positions)))
    checkpoint.reached({A: 3})
    checkpoint.reached({B: 1})
    assert heard == [{A: 3}, {B: 1}]
    assert checkpoint.positions() == {A: 3, B: 1} and checkpoint.position(B) == 1


# --- the invariants, over any interleaving ------------------------------------------------------
@dataclass(frozen=True)
class Reach:
    tp: Partition
    step: int


@dataclass(frozen=True)
class SetHolds:
    holds: dict[Partition, tuple[int, str]]


@dataclass(frozen=True)
class Commit:
    confirm: bool
    only: frozenset[Partition] | None


@dataclass(frozen=True)
class Revoke:
    tp: Partition
    lost: bool


partitions = st.sampled_from([A, B])
operations = st.lists(
    st.one_of(
        st.builds(Reach, partitions, st.integers(0, 5)),
        st.builds(
            SetHolds,
            st.dictionaries(
                partitions, st.tuples(st.integers(0, 40), st.sampled_from(["", "rtc1:1", "x"]))
            ),
        ),
        st.builds(
            Commit,
            st.booleans(),
            st.none() | st.frozensets(partitions, min_size=1),
        ),
        st.builds(Revoke, partitions, st.booleans()),
    ),
    max_size=60,
)


@settings(max_examples=examples(400), deadline=None)
@given(operations)
def test_commit_points_never_pass_a_hold_never_move_back_and_carry_metadata_only_held(
    ops: list[Reach | SetHolds | Commit | Revoke],
) -> None:
    checkpoint = Checkpoint()
    position: dict[Partition, int] = {}
    holds: dict[Partition, tuple[int, str]] = {}
    given_points: dict[Partition, int] = {}  # the last point handed out, this assignment
    for op in ops:
        if isinstance(op, Reach):
            position[op.tp] = position.get(op.tp, 0) + op.step  # positions only move on
            checkpoint.reached({op.tp: position[op.tp]})
        elif isinstance(op, SetHolds):
            holds = dict(op.holds)
            checkpoint.set_holds({tp: Hold(o, m) for tp, (o, m) in holds.items()})
        elif isinstance(op, Revoke):
            (checkpoint.lost if op.lost else checkpoint.revoked)([op.tp])
            position.pop(op.tp, None)
            holds.pop(op.tp, None)
            given_points.pop(op.tp, None)
        else:
            due = checkpoint.due(set(op.only) if op.only is not None else None)
            for tp, (offset, metadata) in due.items():
                assert op.only is None or tp in op.only
                assert offset <= position[tp], "past the position reached"
                hold = holds.get(tp)
                assert hold is None or offset <= hold[0], "past a hold"
                assert offset >= given_points.get(tp, offset), "moved back"
                if metadata is not None:
                    assert hold is not None and offset == hold[0] and metadata == hold[1]
                given_points[tp] = offset
                if op.confirm:
                    checkpoint.confirmed(tp, offset, metadata)
