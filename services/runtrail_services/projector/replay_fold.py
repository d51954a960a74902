"""Folding a topic's events into a projection store: the part of a rebuild that each process
runs, whether the rebuild runs in this process (:func:`.rebuild.rebuild_here`) or in several
(:mod:`.rebuild_workers`).

Events are decoded and upcast as the runtime does and folded with the service's own
:class:`~.folder.RunFolder`; what the runtime would dead-letter as unreadable is counted and
skipped. Replay never re-executes: it reads recorded events and writes the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Unpack

from confluent_kafka import Message

from runtrail.events import Event, EventCodec, EventError
from runtrail.projection import Halt, ProjectionBatch, ProjectionStore
from runtrail.runtime.decoding import iso_from_ms
from runtrail.runtime.gc_tuning import FlushPacedGc
from runtrail_services.projector.folder import APPLIED, FolderOptions, Outcome, Result, RunFolder
from runtrail_services.projector.topic_reader import BoundedTopicReader, PartitionRange


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


def replay(
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
        since_write += fold_batch(batch, codec, fold, summary, positions)
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


def fold_batch(
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
