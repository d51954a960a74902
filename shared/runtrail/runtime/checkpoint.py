"""The checkpoint: the one object that decides what may be committed for each partition.

Why one object: offsets used to reach the runtime three ways (held offsets with commit
metadata, start offsets returned at assignment, and positions pushed after each batch), and a
service that implemented two of the three silently lost the third. Here every party talks to
one :class:`Checkpoint` per runner (modelled on Quix Streams' ``checkpointing``):

- the **runtime** tells it where each batch reached (:meth:`Checkpoint.reached`, counting the
  messages it dead-lettered or dropped as duplicates, which no service sees), asks it after the
  service's flush what to commit (:meth:`Checkpoint.due`), tells it which commits the broker
  confirmed (:meth:`Checkpoint.confirmed`) and which partitions went away
  (:meth:`Checkpoint.revoked`, :meth:`Checkpoint.lost`);
- a **service** tells it, at assignment, where a partition must start when its store keeps
  positions (:meth:`Checkpoint.start_at`) or reads the group's commit to resume from it
  (:meth:`Checkpoint.group_commits`); at each flush, which partitions it still holds (open,
  unwritten state) and with what commit metadata (:meth:`Checkpoint.set_holds`); and it reads
  the positions reached (:meth:`Checkpoint.position`, or :meth:`Checkpoint.watch` to hear of
  each batch).

Invariants (``tests/test_checkpoint.py``): a commit point never passes a hold; within an
assignment a partition's commit points never move back; metadata is committed only with a
held offset. It is used from the consume thread only (a watcher that serves other threads,
like the resume-cache lookups, takes its own lock).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from runtrail.runtime.delivery import Partition

log = logging.getLogger(__name__)

#: what a group's commit is: (offset, metadata); offset -1001 when nothing was committed
Committed = tuple[int, str | None]
#: reads the group's committed offsets and metadata of some partitions (the runtime's consumer)
GroupCommits = Callable[[Sequence[Partition]], Mapping[Partition, Committed]]
#: hears the next offset reached per partition after each batch
Watcher = Callable[[Mapping[Partition, int]], None]

#: librdkafka's OFFSET_INVALID: "nothing committed" (kept here so tests need no consumer)
NOTHING_COMMITTED = -1001


class Held(Protocol):
    """A hold with commit metadata (capture's :class:`~runtrail.capture.holds.Hold`)."""

    @property
    def offset(self) -> int: ...

    @property
    def metadata(self) -> str: ...


def _nothing_committed(partitions: Sequence[Partition]) -> dict[Partition, Committed]:
    """Without a consumer (a service built by a test): the group has committed nothing."""
    return {tp: (NOTHING_COMMITTED, None) for tp in partitions}


class Checkpoint:
    """Positions reached, holds, start points and commits of one runner; see the module doc."""

    def __init__(self, group_commits: GroupCommits = _nothing_committed) -> None:
        self._group_commits = group_commits
        #: per partition, the next offset the consume loop reached
        self._positions: dict[Partition, int] = {}
        #: per partition, (offset, metadata) the service still holds (from its last flush)
        self._holds: dict[Partition, tuple[int, str]] = {}
        #: per partition, the last commit the broker confirmed (this assignment)
        self._committed: dict[Partition, Committed] = {}
        #: per partition, the highest offset handed out for commit (this assignment)
        self._floor: dict[Partition, int] = {}
        #: per partition, the position up to which output is durable (flushed, no hold), and
        #: that of partitions lost before it could be committed
        self._durable: dict[Partition, int] = {}
        self._lost_durable: dict[Partition, int] = {}
        #: set at assignment: where the service's store says a partition starts, and which
        #: partitions resume from the group's commit (the service read it)
        self._starts: dict[Partition, int] = {}
        self._resumed: set[Partition] = set()
        self._watchers: list[Watcher] = []

    # --- what services tell and read --------------------------------------------------------
    def start_at(self, tp: Partition, offset: int) -> None:
        """At assignment (in ``on_assigned``): start ``tp`` at ``offset``, where the service's
        store keeps its position (in the same transaction as its output)."""
        self._starts[tp] = offset

    def group_commits(self, partitions: Sequence[Partition]) -> dict[Partition, Committed]:
        """At assignment: the group's committed offset and metadata of ``partitions`` (offset
        -1001 when nothing was committed). A service that reads them builds its state on them,
        so these partitions start at the group's commit, whatever else happened before."""
        committed = dict(self._group_commits(list(partitions)))
        self._resumed.update(committed)
        return committed

    def set_holds(self, holds: Mapping[Partition, int | Held]) -> None:
        """At each flush: the lowest offset per partition still needed to rebuild open state,
        optionally with commit metadata (Kafka keeps it with the offset, at most
        ``offset.metadata.max.bytes``). Replaces the previous holds: a partition absent here
        holds nothing, and is committed at its position once flushed."""
        self._holds = {
            tp: (h, "") if isinstance(h, int) else (h.offset, h.metadata) for tp, h in holds.items()
        }

    def holds(self) -> dict[Partition, tuple[int, str]]:
        """The holds the service last set: (offset, metadata) per partition."""
        return dict(self._holds)

    def position(self, tp: Partition) -> int | None:
        """The next offset the consume loop reached on ``tp`` (None before its first batch)."""
        return self._positions.get(tp)

    def positions(self) -> dict[Partition, int]:
        return dict(self._positions)

    def watch(self, watcher: Watcher) -> None:
        """Call ``watcher`` with the positions of each batch, as soon as it was processed
        (even one with nothing to deliver): what a service needs that answers other threads
        from the consume loop's progress (read-your-writes)."""
        self._watchers.append(watcher)

    # --- what the runtime tells and asks ----------------------------------------------------
    def assigned(self, partitions: Iterable[Partition]) -> None:
        """Partitions are being assigned (before the service's ``on_assigned``)."""
        for tp in partitions:
            self._starts.pop(tp, None)
            self._resumed.discard(tp)

    def starts(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """After ``on_assigned``: where the service's store says each partition starts."""
        return {tp: self._starts[tp] for tp in partitions if tp in self._starts}

    def restart_points(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """Partitions lost while their commit could not be made, back now, that start at the
        group's commit: the position this process had made durable before, to start from
        when the group's commit is behind it (so an outage does not double the output).
        They stay until :meth:`restarted` (the runtime could not read the group's commit)."""
        points: dict[Partition, int] = {}
        for tp in partitions:
            durable = self._lost_durable.get(tp)
            if durable is not None and tp not in self._starts and tp not in self._resumed:
                points[tp] = durable
        return points

    def restarted(self, partitions: Iterable[Partition]) -> None:
        """The restart points of these partitions were applied: forget them."""
        for tp in partitions:
            self._lost_durable.pop(tp, None)

    def reached(self, positions: Mapping[Partition, int]) -> None:
        """After each batch: the next offset per partition it reached, every message counted."""
        self._positions.update(positions)
        for watcher in self._watchers:
            watcher(positions)

    def flushed(self) -> None:
        """The service's flush returned: the output of every partition it holds nothing of is
        durable up to its position (the restart point should the partition be lost). Told
        before the dead letters are flushed, which may fail while the output stays written."""
        for tp, position in self._positions.items():
            hold = self._holds.get(tp)
            if hold is None or hold[0] > position:
                self._durable[tp] = position

    def due(self, only: set[Partition] | None = None) -> dict[Partition, Committed]:
        """After the service's flush (and the dead-letter flush) returned: the commit point
        of each partition (of ``only``) that differs from its confirmed one.

        A partition is committed at its hold, with the hold's metadata, when the hold is at or
        below its position (at the position itself the metadata is still worth keeping);
        else at its position, without metadata. A point below one handed out before in this
        assignment is never given: the previous commit stands.
        """
        points: dict[Partition, Committed] = {}
        for tp, position in self._positions.items():
            if only is not None and tp not in only:
                continue
            hold = self._holds.get(tp)
            if hold is not None and hold[0] <= position:
                point: Committed = (hold[0], hold[1] or None)
            else:
                point = (position, None)
            floor = self._floor.get(tp)
            if floor is not None and point[0] < floor:
                log.warning(
                    "%s[%d]: a hold at %d is below the offset %d already committed; "
                    "keeping that commit",
                    *tp,
                    point[0],
                    floor,
                )
                continue
            if self._committed.get(tp) != point:
                points[tp] = point
                self._floor[tp] = point[0]
        return points

    def confirmed(self, tp: Partition, offset: int, metadata: str | None) -> None:
        """The broker confirmed a commit of this assignment."""
        self._committed[tp] = (offset, metadata or None)

    def lost(self, partitions: Iterable[Partition]) -> None:
        """Partitions were taken away without a commit: remember what was durable, then forget."""
        parts = list(partitions)
        for tp in parts:
            if tp in self._durable:
                self._lost_durable[tp] = self._durable[tp]
        self.revoked(parts)

    def revoked(self, partitions: Iterable[Partition]) -> None:
        """Partitions are gone (after their commit was sent): forget everything about them."""
        for tp in partitions:
            self._positions.pop(tp, None)
            self._holds.pop(tp, None)
            self._committed.pop(tp, None)
            self._floor.pop(tp, None)
            self._durable.pop(tp, None)
