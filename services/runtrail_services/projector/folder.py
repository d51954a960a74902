"""Fold one partition's events into run projections, ready to be written as one batch.

The projector service keeps one :class:`RunFolder` per assigned partition, the topic replay
one per partition of the topic; both get the same projections from the same events, which is
what makes a shadow rebuild comparable with the live store.

Where a run starts (the first time the folder meets it)
  1. its row in the target store, verified like a snapshot (:func:`from_snapshot`): the row
     is the state as of the offsets stored with it, stamped with the projector version that
     wrote it. A row written by another projector version is not trusted: the run halts with
     ``snapshot-mismatch`` instead of building new code's state on old code's output; it is
     rebuilt from its events by ``runtrail replay projection --into`` a fresh store.
  2. else, when a snapshot source is given (the replay's ``--snapshots``), the run's latest
     snapshot if it is trusted. An untrusted one (another projector version, unreadable) is
     refused and the run is rebuilt from its events. A trusted one must be followed by the
     very next sequence: if the first event read after it is further on, the events in
     between were not read (the replay started after them) and the run halts rather than
     skipping them.
  3. else from nothing: the run's first event must open it.

Every event must be the run's next sequence (``halt_on_gap``, the default): a hole means an
event was dead-lettered by the runtime (undecodable, a version newer than this code…) or lost,
and projecting around it would be guessing, so the run halts with ``missing-events``.
(:func:`~runtrail.projection.apply_event` alone records such gaps and goes on.)

A run whose event cannot be applied halts: the :class:`Halt` (reason and coordinates) is
written in the same batch as the offsets, its last good state stays, and its later events
are skipped — they wait, counted, until an operator rebuilds or repairs the run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, TypedDict

from pydantic import ValidationError

from runtrail.events import Event
from runtrail.projection import (
    PROJECTOR_VERSION,
    EventCoordinates,
    Halt,
    MissingEvents,
    ProjectionError,
    ProjectionSnapshot,
    ProjectionStore,
    RunProjection,
    SnapshotMismatch,
    apply_event,
    from_snapshot,
    take_snapshot,
)

RunKey = tuple[str, str]  # (tenant ID, run ID)


class Outcome(enum.Enum):
    APPLIED = "applied"
    #: Already applied (a redelivery): the projection is unchanged.
    DUPLICATE = "duplicate"
    #: This event halted its run.
    HALTED = "halted"
    #: Its run halted earlier: the event waits, not applied.
    SKIPPED = "skipped"
    #: The very event that halted its run, delivered again (after a restart or a rebalance):
    #: not applied, but the service dead-letters it again (dead letters are at least once).
    REHALTED = "rehalted"


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    #: Why the run halted (HALTED and REHALTED): ``"<code>: <message>"``.
    reason: str | None = None

    @property
    def code(self) -> str:
        """The machine-readable part of the reason (the dead-letter reason)."""
        return (self.reason or "").partition(": ")[0]

    @property
    def detail(self) -> str:
        """The reason without its code (the dead-letter detail)."""
        return (self.reason or "").partition(": ")[2]


#: the result of nearly every event: the replay counts the others one by one
APPLIED: Final = Result(Outcome.APPLIED)
_DUPLICATE = Result(Outcome.DUPLICATE)
_SKIPPED = Result(Outcome.SKIPPED)


@dataclass(frozen=True, slots=True)
class _HaltInfo:
    reason: str
    coordinates: EventCoordinates | None


@dataclass
class Pending:
    """What the folder has to write since its last commit."""

    projections: dict[RunKey, RunProjection] = field(default_factory=dict)
    halts: list[Halt] = field(default_factory=list)
    snapshots: dict[RunKey, ProjectionSnapshot] = field(default_factory=dict)


class FolderOptions(TypedDict, total=False):
    """The keyword options of :class:`RunFolder`, passed on as they are by the rebuild's
    :class:`~runtrail_services.projector.replay_fold.ReplayFold`."""

    snapshot_every: int
    cached_runs: int
    snapshots: ProjectionStore | None
    halt_on_gap: bool


#: a run this folder has not met since its cache was last trimmed (None is a state: no run yet)
_UNSEEN: Final = object()


class RunFolder:
    """Applies one partition's events, in order, to the runs they belong to."""

    def __init__(
        self,
        store: ProjectionStore,
        topic: str,
        partition: int,
        *,
        snapshot_every: int = 0,
        cached_runs: int = 50_000,
        snapshots: ProjectionStore | None = None,
        halt_on_gap: bool = True,
        met: set[RunKey] | None = None,
        drafts: bool = False,
    ) -> None:
        self.store = store
        #: Given when ``store`` was empty at the start (a rebuild): the runs every folder writing
        #: to it has met, which are the only rows it can hold; a run met for the first time is
        #: not looked up (a query per run). The folder adds the runs it meets.
        self.met = met
        #: With ``drafts`` (the replay), a state this folder made since its last commit and
        #: handed to nothing else (no snapshot holds it) is updated in place by the next event:
        #: only the last state of a run before a write is ever read. The keys of those drafts.
        self._drafts: set[RunKey] | None = set() if drafts else None
        self.halt_on_gap = halt_on_gap
        self.topic = topic
        self.partition = partition
        self.snapshot_every = snapshot_every
        self.cached_runs = cached_runs
        self.snapshot_source = snapshots
        #: Next offset to consume (last event given + 1); None before the first event.
        self.next_offset: int | None = None
        self.pending = Pending()
        #: Snapshots refused because they could not be trusted (those runs are rebuilt).
        self.untrusted_snapshots = 0
        #: (tenant, run, reason) of each refused snapshot, for the replay's summary.
        self.refused_snapshots: list[tuple[str, str, str]] = []
        self._states: dict[RunKey, RunProjection | None] = {}
        self._halted: dict[RunKey, _HaltInfo] = {}
        #: Runs started from a snapshot, by its sequence, until the event after it arrives.
        self._resumed: dict[RunKey, int] = {}
        #: A stored row that cannot be trusted: the reason, raised at the run's next event.
        self._untrusted: dict[RunKey, str] = {}

    # --- applying ------------------------------------------------------------------------------
    def apply(self, event: Event, offset: int) -> Result:
        """Apply one event (the next of this partition) and say what became of it."""
        self.next_offset = offset + 1
        key = (event.tenant_id, event.run_id)
        state = self._states.get(key, _UNSEEN)
        if state is _UNSEEN and key not in self._halted:
            state = self._states[key] = self._load(key)
        if self._halted:
            halted = self._halted.get(key)
            if halted is not None:
                return self._waiting(halted, offset)
        assert state is None or isinstance(state, RunProjection)
        version = 0 if state is None else state.version
        drafts = self._drafts
        try:
            if self._untrusted or self._resumed:
                self._check_start(key, event)
            if self.halt_on_gap and event.sequence > version + 1:
                self._check_gap(state, event)
            in_place = drafts is not None and key in drafts
            new = apply_event(state, event, in_place=in_place)
        except ProjectionError as exc:
            return self._halt(key, event, exc, offset)
        if new is state and new.version == version:
            return _DUPLICATE
        self._states[key] = new
        self.pending.projections[key] = new
        every = self.snapshot_every
        if every and new.version // every > version // every:
            self.pending.snapshots[key] = take_snapshot(new)
            if drafts is not None:
                drafts.discard(key)  # the snapshot holds this state: the next event copies it
        elif drafts is not None and not in_place:
            drafts.add(key)
        return APPLIED

    def advance(self, position: int) -> None:
        """The partition was read up to ``position`` (messages not given to :meth:`apply`)."""
        if self.next_offset is None or position > self.next_offset:
            self.next_offset = position

    def _waiting(self, halted: _HaltInfo, offset: int) -> Result:
        c = halted.coordinates
        if c is not None and (c.topic, c.partition, c.offset) == (
            self.topic,
            self.partition,
            offset,
        ):
            return Result(Outcome.REHALTED, halted.reason)
        return _SKIPPED

    def _check_start(self, key: RunKey, event: Event) -> None:
        untrusted = self._untrusted.pop(key, None)
        if untrusted is not None:
            raise SnapshotMismatch(untrusted, event=event)
        resumed = self._resumed.get(key)
        if resumed is None or event.sequence <= resumed:
            return
        del self._resumed[key]
        if event.sequence > resumed + 1:
            raise SnapshotMismatch(
                f"the run starts from a snapshot at sequence {resumed}, but the first event "
                f"read after it is {event.sequence}: events {resumed + 1}..{event.sequence - 1} "
                "were not read (replay from an earlier point)",
                event=event,
            )

    def _check_gap(self, state: RunProjection | None, event: Event) -> None:
        expected = state.version + 1 if state is not None else 1
        if self.halt_on_gap and event.sequence > expected:
            missing = (
                f"event {expected}"
                if event.sequence == expected + 1
                else f"events {expected}..{event.sequence - 1}"
            )
            raise MissingEvents(
                f"{missing} of this run never arrived (dead-lettered, lost, or before the "
                "replay's start): the projection stops rather than project around them",
                event=event,
            )

    def _halt(self, key: RunKey, event: Event, error: ProjectionError, offset: int) -> Result:
        halt = Halt.of(event, error, topic=self.topic, partition=self.partition, offset=offset)
        self.pending.halts.append(halt)
        self._halted[key] = _HaltInfo(halt.reason, halt.coordinates)
        self._states.pop(key, None)
        if self._drafts is not None:
            self._drafts.discard(key)
        return Result(Outcome.HALTED, halt.reason)

    # --- where a run starts --------------------------------------------------------------------
    def _load(self, key: RunKey) -> RunProjection | None:
        if self.met is not None and key not in self.met:
            self.met.add(key)  # new to a store that was empty: no row to read
            return self._first_sight(key)
        try:
            row = self.store.get(*key)
        except ValidationError as exc:  # a row another projector version wrote, unreadable now
            self._untrusted[key] = f"the stored projection is unreadable by this projector: {exc}"
            return None
        if row is not None:
            if row.halted:
                reason = row.halt_reason or "halted"
                self._halted[key] = _HaltInfo(reason, row.halt_coordinates)
                return None
            if row.state is not None:
                return self._trusted_row(key, row.projector_version, row.version, row.state)
        return self._first_sight(key)

    def _first_sight(self, key: RunKey) -> RunProjection | None:
        """A run the target store does not hold: its snapshot, if there is a source, else
        nothing (its first event opens it)."""
        if self.snapshot_source is not None:
            return self._from_snapshot(key, self.snapshot_source)
        return None

    def _trusted_row(
        self, key: RunKey, projector_version: int, version: int, state: RunProjection
    ) -> RunProjection | None:
        snapshot = ProjectionSnapshot(
            projector_version=projector_version, last_applied_sequence=version, state=state
        )
        try:
            return from_snapshot(snapshot)
        except SnapshotMismatch:
            self._untrusted[key] = (
                f"the stored projection of {key[0]}/{key[1]} was written by projector "
                f"v{projector_version}, this is v{PROJECTOR_VERSION}: it is not trusted; rebuild "
                "with `runtrail replay projection --into` a fresh store"
            )
            return None

    def _from_snapshot(self, key: RunKey, source: ProjectionStore) -> RunProjection | None:
        try:
            snapshot = source.load_snapshot(*key)
        except (SnapshotMismatch, ValidationError) as exc:
            self.untrusted_snapshots += 1  # refused: the run is rebuilt from its events
            self.refused_snapshots.append((*key, str(exc)))
            return None
        if snapshot is None:
            return None
        self._resumed[key] = snapshot.last_applied_sequence
        # the run is in the new store even if no event after the snapshot is read
        self.pending.projections[key] = snapshot.state
        return snapshot.state

    # --- after a write -------------------------------------------------------------------------
    def committed(self) -> None:
        """The pending writes are durable: forget them, and trim the cache of run states."""
        self.pending = Pending()
        if self._drafts is not None:
            self._drafts.clear()  # what was written is never changed afterwards
        excess = len(self._states) - self.cached_runs
        if excess > 0:
            for key in list(self._states)[:excess]:  # oldest first; reloaded from the store
                del self._states[key]

    def halted_runs(self) -> int:
        """Runs known halted in this partition (loaded or halted here)."""
        return len(self._halted)
