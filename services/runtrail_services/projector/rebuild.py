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

A run's events must all be in one partition (the publisher keys every event by run ID): a
partition is folded in its order, but two partitions have no order between them, so a run met
in a second partition fails the rebuild (:class:`RunInTwoPartitions`), whatever the number of
processes, rather than leave a row folded from half its events.

The rebuild marks the store it writes: :data:`REBUILD_MARK` is a position (in
``runtrail_positions``, under the events topic; never a Kafka partition) that stands at
:data:`STARTED` from before the first write until the last one, then at :data:`FINISHED`. A
store left at :data:`STARTED` (Ctrl-C, a failure) is incomplete, and :func:`check_fresh` says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.projection import (
    ProjectionBatch,
    ProjectionDifference,
    ProjectionStore,
    compare_projections,
)
from runtrail.runtime.gc_tuning import service_gc
from runtrail_services.projector.folder import FolderOptions
from runtrail_services.projector.interrupts import ctrl_c_sets, raise_if_set
from runtrail_services.projector.partitioned_fold import PartitionedFold
from runtrail_services.projector.replay_fold import (
    Progress,
    ReplayFold,
    ReplaySummary,
    replay,
)
from runtrail_services.projector.topic_reader import BoundedTopicReader

#: The partition number of the rebuild's mark in the store's positions (no Kafka partition
#: is negative, so nothing that reads a topic's partitions ever reads it).
REBUILD_MARK = -1
#: The mark's values: a rebuild has written (or is writing) into the store, and has not
#: finished; the rebuild finished (every partition is at its captured end).
STARTED, FINISHED = 0, 1


class StoreNotEmpty(ValueError):
    """A rebuild goes into a new store; this one already holds projections or offsets."""


def check_fresh(store: ProjectionStore, topic: str, partitions: Iterable[int]) -> None:
    """Refuse a store that already holds rows or offsets: a rebuild starts from nothing."""
    mark = store.stored_offsets(topic, [REBUILD_MARK]).get(REBUILD_MARK)
    if mark == STARTED:
        raise StoreNotEmpty(
            f"the target store holds a rebuild of {topic} that never finished (interrupted, or "
            "it failed): it is incomplete, some runs and partitions missing; delete it and "
            "rebuild into a new store"
        )
    done = f" (a finished rebuild of {topic})" if mark == FINISHED else ""
    if store.list(limit=1):
        raise StoreNotEmpty(
            f"the target store already holds projections{done}; rebuild into a new one"
        )
    if store.stored_offsets(topic, partitions):
        raise StoreNotEmpty(f"the target store already holds offsets of {topic}{done}")


def mark_rebuild(store: ProjectionStore, topic: str, value: int) -> None:
    """Set the store's rebuild mark (:data:`STARTED` or :data:`FINISHED`) in its own batch."""
    store.apply_batch(ProjectionBatch(offsets={(topic, REBUILD_MARK): value}))


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
    with ctrl_c_sets(threading.Event()) as interrupted:
        try:
            mark_rebuild(into, topic, STARTED)  # before anything else is written
        except BaseException:
            reader.close()
            raise
        summary = _rebuild(
            settings, reader, plan, into, snapshots, options, write_every, on_progress,
            progress_interval_s, interrupted,
        )  # fmt: skip
        raise_if_set(interrupted)  # a store Ctrl-C stopped is never marked finished
        mark_rebuild(into, topic, FINISHED)
    return summary


def _rebuild(
    settings: Settings,
    reader: BoundedTopicReader,
    plan: Any,
    into: ProjectionStore,
    snapshots: ProjectionStore | None,
    options: FolderOptions,
    write_every: int,
    on_progress: Callable[[Progress], None] | None,
    progress_interval_s: float,
    interrupted: threading.Event,
) -> ReplaySummary:
    """The fold itself, in worker processes or in this one; Ctrl-C raised at safe points."""
    from runtrail_services.projector import rebuild_workers

    topic = settings.events_topic
    if plan is not None:
        reader.close()  # it captured the ranges; each process reads with a consumer of its own
        summary = rebuild_workers.rebuild_in_workers(
            settings,
            plan,
            into,
            snapshots,
            options=options,
            write_every=write_every,
            on_progress=on_progress,
            progress_interval_s=progress_interval_s,
            interrupted=interrupted,
        )
    else:
        fold = PartitionedFold(into, topic, **FolderOptions(**options, snapshots=snapshots))

        def progress(now: Progress) -> None:  # at least every progress_interval_s
            raise_if_set(interrupted)
            if on_progress is not None:
                on_progress(now)

        summary = rebuild_here(
            reader,
            fold,
            EventCodec(settings.extra_schema_dirs),
            write_every=write_every,
            on_progress=progress,
            progress_interval_s=progress_interval_s,
        )
    return summary


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
            replay(
                reader, codec, fold, summary, paced, write_every, on_progress, progress_interval_s
            )
    finally:
        reader.close()
    fold.tally(summary)
    return summary


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
