"""Rebuild a projection store by replaying the topic: the shadow rebuild of seed 002.

:func:`rebuild_projection` reads the whole topic once (all partitions, up to the high
watermarks when it started; see :mod:`.topic_reader`), decodes and upcasts each event as the
runtime does, folds it with the same :class:`~.folder.RunFolder` the service uses, and writes
rows, halts, snapshots and offsets to a *fresh* store in batches. Replay never re-executes: it
reads recorded events and writes the store, nothing else — no dead letters, no commits.

What the rebuilt store holds equals what the live service would hold at the same offsets:
what the runtime would dead-letter as unreadable is counted and skipped here too; duplicates
the runtime would drop are no-ops to the projector. It ends with the offsets it reached
(the captured high watermarks), so the projector service can be pointed at it and continue
exactly there — which is how a store of another projector version is replaced.

With ``snapshots`` (a store holding the live service's snapshots) each run starts from its
latest trusted snapshot; an untrusted one is refused and that run is rebuilt from its events.
With ``from_timestamp_ms`` the read starts at that time: runs that began earlier need a
snapshot covering every event before it, or they halt (visibly) instead of being guessed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Unpack

from confluent_kafka import Message

from runtrail.config import Settings
from runtrail.events import Event, EventCodec, EventError
from runtrail.projection import (
    Halt,
    ProjectionBatch,
    ProjectionDifference,
    ProjectionStore,
    compare_projections,
)
from runtrail.runtime.decoding import iso_from_ms
from runtrail.runtime.gc_tuning import FlushPacedGc, service_gc
from runtrail_services.projector.folder import APPLIED, FolderOptions, Outcome, Result, RunFolder
from runtrail_services.projector.topic_reader import BoundedTopicReader, PartitionRange


class StoreNotEmpty(ValueError):
    """A rebuild goes into a new store; this one already holds projections or offsets."""


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a rebuild stands (for a progress line)."""

    events: int
    total: int
    runs: int
    halted: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Unreadable:
    """A message the runtime would dead-letter (it cannot be decoded as an event)."""

    partition: int
    offset: int
    reason: str


@dataclass
class ReplaySummary:
    """What a rebuild read and built."""

    topic: str
    ranges: list[PartitionRange]
    events: int = 0
    applied: int = 0
    duplicates: int = 0
    skipped: int = 0
    runs: int = 0
    halted: list[Halt] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    untrusted_snapshots: int = 0
    #: (tenant, run, reason) of each snapshot refused; each such run was rebuilt from events.
    refused_snapshots: list[tuple[str, str, str]] = field(default_factory=list)
    seconds: float = 0.0
    #: Processes that folded (1: this one; more: :mod:`.rebuild_workers`).
    workers: int = 1

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def offsets(self) -> dict[int, int]:
        """The next offset per partition the rebuilt store holds."""
        return {r.partition: r.end for r in self.ranges}


class ReplayFold:
    """The pure half of a rebuild: events in, store batches out (no clock, no Kafka).

    ``store`` is empty when the fold starts (:func:`check_fresh`): a run is looked up in it
    only once it was met, since no other run can have a row there. Only the states written
    are read, so each folder updates its own unwritten states in place (``drafts``)."""

    def __init__(
        self, store: ProjectionStore, topic: str, **options: Unpack[FolderOptions]
    ) -> None:
        self.store = store
        self.topic = topic
        self._options = options  # each partition's RunFolder gets them
        self.folders: dict[int, RunFolder] = {}
        self.runs: set[tuple[str, str]] = set()
        self.halted: list[Halt] = []
        self.counts: dict[Outcome, int] = dict.fromkeys(Outcome, 0)

    def add(self, partition: int, offset: int, event: Event) -> Outcome:
        """Fold one event (the replay calls :meth:`folder` ``.apply`` itself, then :meth:`note`
        for what was not applied and :meth:`applied` once per batch)."""
        result = self.folder(partition).apply(event, offset)
        if result is APPLIED:
            self.applied(1)
        else:
            self.note(partition, result)
        return result.outcome

    def folder(self, partition: int) -> RunFolder:
        """The partition's folder (made at its first event)."""
        folder = self.folders.get(partition)
        if folder is None:
            # the store was checked empty: only runs met here can have rows (``met``)
            folder = self.folders[partition] = RunFolder(
                self.store, self.topic, partition, met=self.runs, drafts=True, **self._options
            )
        return folder

    def applied(self, count: int) -> None:
        """``count`` events were applied (counted once per batch, not per event)."""
        self.counts[Outcome.APPLIED] += count

    def note(self, partition: int, result: Result) -> None:
        """Count an event that was not applied; keep the halt if it halted its run."""
        self.counts[result.outcome] += 1
        if result.outcome is Outcome.HALTED:
            self.halted.append(self.folders[partition].pending.halts[-1])

    def write(self, offsets: dict[int, int]) -> None:
        """Write everything pending, with ``offsets`` (partition -> next offset), in one batch."""
        batch = ProjectionBatch(
            projections=[s for f in self.folders.values() for s in f.pending.projections.values()],
            halts=[h for f in self.folders.values() for h in f.pending.halts],
            snapshots=[s for f in self.folders.values() for s in f.pending.snapshots.values()],
            offsets={(self.topic, p): o for p, o in offsets.items()},
        )
        self.store.apply_batch(batch)
        for folder in self.folders.values():
            folder.committed()

    @property
    def untrusted_snapshots(self) -> int:
        return sum(f.untrusted_snapshots for f in self.folders.values())

    def tally(self, summary: ReplaySummary) -> None:
        """Set ``summary``'s outcome counts, runs, halts and snapshot figures from this fold."""
        summary.applied = self.counts[Outcome.APPLIED]
        summary.duplicates = self.counts[Outcome.DUPLICATE]
        summary.skipped = self.counts[Outcome.SKIPPED] + self.counts[Outcome.REHALTED]
        summary.runs = len(self.runs)
        summary.halted = self.halted
        summary.untrusted_snapshots = self.untrusted_snapshots
        summary.refused_snapshots = [r for f in self.folders.values() for r in f.refused_snapshots]


def check_fresh(store: ProjectionStore, topic: str, partitions: Iterable[int]) -> None:
    """Refuse a store that already holds rows or offsets: a rebuild starts from nothing."""
    if store.list(limit=1):
        raise StoreNotEmpty("the target store already holds projections; rebuild into a new one")
    if store.stored_offsets(topic, partitions):
        raise StoreNotEmpty(f"the target store already holds offsets of {topic}")


def rebuild_projection(
    settings: Settings,
    into: ProjectionStore,
    *,
    from_timestamp_ms: int | None = None,
    snapshots: ProjectionStore | None = None,
    snapshot_every: int = 0,
    cached_runs: int = 50_000,
    halt_on_gap: bool = True,
    write_every: int = 20_000,
    on_progress: Callable[[Progress], None] | None = None,
    progress_interval_s: float = 1.0,
    workers: int | None = None,
) -> ReplaySummary:
    """Replay ``settings.events_topic`` into the fresh store ``into``; see the module doc.

    ``workers`` processes (this one and spawned ones) fold disjoint sets of whole partitions
    in parallel (see :mod:`.rebuild_workers`); None: one per CPU, at most one per partition
    holding events (and at most :data:`~.rebuild_workers.MAX_WORKERS`). With 1, or a store
    another process cannot open (in memory), this process alone folds, as it always did."""
    from runtrail_services.projector import rebuild_workers

    topic = settings.events_topic
    options = FolderOptions(
        snapshot_every=snapshot_every, cached_runs=cached_runs, halt_on_gap=halt_on_gap
    )
    reader = BoundedTopicReader(settings, topic, from_timestamp_ms=from_timestamp_ms)
    try:
        check_fresh(into, topic, [r.partition for r in reader.ranges])
        plan = rebuild_workers.plan(reader.ranges, workers, into, snapshots)
    except BaseException:
        reader.close()
        raise
    if plan is not None:
        reader.close()  # it captured the ranges; each process reads with a consumer of its own
        return rebuild_workers.rebuild_in_workers(
            settings,
            plan,
            into,
            snapshots,
            options=options,
            write_every=write_every,
            on_progress=on_progress,
            progress_interval_s=progress_interval_s,
        )
    fold = ReplayFold(into, topic, **FolderOptions(**options, snapshots=snapshots))
    return rebuild_here(
        reader,
        fold,
        EventCodec(settings.extra_schema_dirs),
        write_every=write_every,
        on_progress=on_progress,
        progress_interval_s=progress_interval_s,
    )


def rebuild_here(
    reader: BoundedTopicReader,
    fold: ReplayFold,
    codec: EventCodec,
    *,
    write_every: int,
    on_progress: Callable[[Progress], None] | None,
    progress_interval_s: float,
) -> ReplaySummary:
    """Read ``reader`` to its end folding with ``fold``, in this process; closes ``reader``."""
    summary = ReplaySummary(topic=fold.topic, ranges=reader.ranges)
    try:
        # the fold's state lives until written: collect after each write, not every 700
        # allocations (in the audit service those took a tenth of the run)
        with service_gc() as paced:
            _replay(
                reader, codec, fold, summary, paced, write_every, on_progress, progress_interval_s
            )
    finally:
        reader.close()
    fold.tally(summary)
    return summary


def _replay(
    reader: BoundedTopicReader,
    codec: EventCodec,
    fold: ReplayFold,
    summary: ReplaySummary,
    paced: FlushPacedGc,
    write_every: int,
    on_progress: Callable[[Progress], None] | None,
    progress_interval_s: float,
) -> None:
    """The read loop: fold each batch, write every ``write_every`` events and at the end."""
    started = time.monotonic()
    last_report = started
    positions: dict[int, int] = {}
    since_write = 0

    def progress() -> Progress:
        return Progress(
            summary.events,
            reader.total,
            len(fold.runs),
            len(fold.halted),
            time.monotonic() - started,
        )

    for batch in reader.batches():
        since_write += _fold_batch(batch, codec, fold, summary, positions)
        if since_write >= write_every:
            fold.write(positions)
            paced.after_flush()
            since_write = 0
        now = time.monotonic()
        if on_progress is not None and now - last_report >= progress_interval_s:
            on_progress(progress())
            last_report = now
    # every partition ends at its captured watermark, read or not (control records, or a
    # start after its last event); an empty one stays absent, as in the live store
    fold.write({p: o for p, o in summary.offsets.items() if o > 0})
    summary.seconds = time.monotonic() - started
    if on_progress is not None:
        on_progress(progress())


def _fold_batch(
    batch: Iterable[Message],
    codec: EventCodec,
    fold: ReplayFold,
    summary: ReplaySummary,
    positions: dict[int, int],
) -> int:
    """Decode and fold each message at once (the event is still in the cache; a decoded batch
    held until folded measured no faster, and more for the GC); counts once per batch."""
    count = applied = 0
    decode = codec.decode_event_only  # the fold reads the event, never the written form
    appliers: dict[int, Callable[[Event, int], Result]] = {}
    # LogAppendTime is stamped per produce request, so consecutive messages share it
    last_ts, last_iso = -1, None
    for msg in batch:
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None
        positions[partition] = offset + 1
        count += 1
        ts_type, ts = msg.timestamp()
        if ts != last_ts:
            last_ts, last_iso = ts, iso_from_ms(ts) if ts_type else None
        try:
            event = decode(msg.value(), last_iso)
        except EventError as exc:  # the runtime dead-letters these; the live store skips them
            summary.unreadable.append(Unreadable(partition, offset, exc.reason))
            continue
        apply = appliers.get(partition)
        if apply is None:
            apply = appliers[partition] = fold.folder(partition).apply
        result = apply(event, offset)
        if result is APPLIED:
            applied += 1
        else:
            fold.note(partition, result)
    summary.events += count
    fold.applied(applied)
    return count


@dataclass(frozen=True, slots=True)
class Comparison:
    """The runs whose rebuilt projection differs from the live one, and both positions."""

    differences: list[ProjectionDifference]
    live_offsets: dict[int, int]
    rebuilt_offsets: dict[int, int]

    @property
    def same_position(self) -> bool:
        """Whether both stores stand at the same offsets (0 and absent both mean "nothing")."""

        def read(offsets: dict[int, int]) -> dict[int, int]:
            return {p: o for p, o in offsets.items() if o > 0}

        return read(self.live_offsets) == read(self.rebuilt_offsets)


def compare_with_live(
    live: ProjectionStore, rebuilt: ProjectionStore, topic: str, partitions: Iterable[int]
) -> Comparison:
    """Compare every run (A = live, B = rebuilt); also report where each store stands."""
    wanted = list(partitions)
    return Comparison(
        differences=compare_projections(live, rebuilt),
        live_offsets=live.stored_offsets(topic, wanted),
        rebuilt_offsets=rebuilt.stored_offsets(topic, wanted),
    )
