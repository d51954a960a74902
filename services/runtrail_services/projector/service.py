"""``runtrail run projector``: the event-sourced projection of every run, exactly once into a store.

Each assigned partition gets a :class:`~runtrail_services.projector.folder.RunFolder`; at
:meth:`ProjectorService.flush` the projections, halts, snapshots *and* the next offset of every
partition are written in one store transaction, and on assignment the service tells the
checkpoint the offsets stored there, so the runtime starts each partition exactly where the
store stands (from the beginning when the store has never seen the partition: a projection
needs every event, and a group's Kafka commits may belong to another store). A crash at any point is
undone by that: the rows and the offsets they cover move together.

A run whose event cannot be applied halts visibly: a halt row (reason, event coordinates), the
``runtrail_projection_halted_runs`` gauge, and the event in the dead-letter topic with the
projector's reason (``invalid-transition``, ``unknown-event-version``, ``invalid-event-data``,
``missing-events``, ``snapshot-mismatch``). Its later events are skipped and counted; other
runs go on. ``missing-events`` is how an event the runtime dead-lettered (a version newer than
this code, say) stops its run: the next event of the run finds the hole.

Dead letters are at least once. The runtime flushes them right *after* :meth:`flush`, so the
offset stored for a partition stays at the first event dead-lettered since the previous flush
until the next flush (by which time the runtime has flushed them). If the process dies in
between, the halting event is consumed again, found to be the one its halted run stopped at,
and dead-lettered again; everything else it re-reads is a duplicate to the projector.

A write the store cannot take now (disk full, read-only file, database down: the errors of
:mod:`runtrail.runtime.store_errors`) raises
:class:`~runtrail.runtime.unavailable.StoreUnavailable`: the transaction was rolled back, the
folders still hold the batch, and the runtime retries :meth:`flush` (503 on ``/readyz``)
without committing until it succeeds.

A write the store's fences refuse (:class:`~runtrail.projection.StoreConflict`: another
consumer moved a run or an offset further) means this process's view is stale: it raises, the
runtime stops without committing, and the restart seeks back to the store's offsets.

Snapshots (``snapshot_every``) are written in the same transaction. The service's own restart
point is the projection row (a snapshot at the stored offset, verified like one); the periodic
snapshots are the starting points of ``runtrail replay projection --snapshots``. A row written
by another projector version is not trusted: its run halts with ``snapshot-mismatch`` and is
rebuilt from its events by replaying the topic into a fresh store (see :mod:`.rebuild`), which
this service can then continue from, since the replay stores the offsets it reached.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from confluent_kafka import OFFSET_BEGINNING

from runtrail.persistence.kinds import PROJECTIONS
from runtrail.persistence.registry import open_store
from runtrail.persistence.urls import redact_url
from runtrail.projection import (
    PROJECTOR_VERSION,
    Halt,
    ProjectionBatch,
    ProjectionSnapshot,
    RunProjection,
    StoreConflict,
)
from runtrail.runtime import Delivered, Partition, Service, ServiceContext
from runtrail.runtime.store_errors import unavailable_on_store_errors
from runtrail_services.projector.folder import Outcome, RunFolder
from runtrail_services.projector.metrics import ProjectorMetrics
from runtrail_services.projector.settings import ProjectorSettings

log = logging.getLogger(__name__)


class ProjectorService(Service):
    """Applies every event to its run's projection; halts runs it cannot apply to."""

    name = "projector"
    reads_written = False  # events built straight from the bytes on the compiled path
    default_port = 9450

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.settings = ProjectorSettings.load(context.options)
        url = self.settings.resolved_store_url(context.settings.state_dir)
        self.store = open_store(PROJECTIONS, url)
        self._what = f"projection store {redact_url(url)}"
        self.metrics = ProjectorMetrics(self.name, context.registry)
        self.metrics.halted_runs.set(len(self.store.list(halted=True)))
        self._folders: dict[Partition, RunFolder] = {}
        #: The next offset stored for each partition (what the store says, or what we wrote).
        self._stored: dict[Partition, int] = {}
        #: The lowest offset dead-lettered per partition since the last flush.
        self._unconfirmed: dict[Partition, int] = {}
        log.info(
            "projector: store %s, snapshot every %d, projector v%d",
            redact_url(url),
            self.settings.snapshot_every,
            PROJECTOR_VERSION,
        )

    # --- assignment ----------------------------------------------------------------------------
    def on_assigned(self, partitions: Sequence[Partition]) -> None:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in partitions:
            by_topic[topic].append(partition)
        start: dict[Partition, int] = {}
        for topic, numbers in by_topic.items():
            stored = self.store.stored_offsets(topic, numbers)
            for number in numbers:
                tp = (topic, number)
                self._folders[tp] = self._new_folder(tp)
                self._unconfirmed.pop(tp, None)
                if number in stored:
                    self._stored[tp] = start[tp] = stored[number]
                else:
                    self._stored.pop(tp, None)
                    start[tp] = OFFSET_BEGINNING
        for tp, offset in start.items():
            self.context.checkpoint.start_at(tp, offset)
        if start:  # an incremental rebalance may add nothing to this member
            log.info(
                "projector starts at %s", ", ".join(_fmt(tp, o) for tp, o in sorted(start.items()))
            )

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        """After a clean revoke the runtime flushed first; after a lost partition it did not,
        and the new owner redoes what is dropped here."""
        for tp in partitions:
            self._folders.pop(tp, None)
            self._stored.pop(tp, None)
            self._unconfirmed.pop(tp, None)

    def _new_folder(self, tp: Partition) -> RunFolder:
        return RunFolder(
            self.store,
            tp[0],
            tp[1],
            snapshot_every=self.settings.snapshot_every,
            cached_runs=self.settings.cached_runs,
            halt_on_gap=self.settings.halt_on_gap,
        )

    # --- events --------------------------------------------------------------------------------
    def process(self, batch: Sequence[Delivered]) -> None:
        counts: dict[Outcome, int] = defaultdict(int)
        for delivered in batch:
            tp = delivered.source
            folder = self._folders.get(tp)
            if folder is None:  # not announced by on_assigned: cannot happen with the runtime
                folder = self._folders[tp] = self._new_folder(tp)
            result = folder.apply(delivered.event, delivered.offset)
            counts[result.outcome] += 1
            if result.outcome in (Outcome.HALTED, Outcome.REHALTED):
                self._dead_letter(delivered, result.code, result.detail)
                if result.outcome is Outcome.HALTED:
                    self.metrics.halts(result.code).inc()
                    self.metrics.halted_runs.inc()
        for outcome, count in counts.items():
            name = "halted" if outcome is Outcome.REHALTED else outcome.value
            self.metrics.events(name).inc(count)

    def _dead_letter(self, delivered: Delivered, code: str, detail: str) -> None:
        event = delivered.event
        log.warning(
            "projection of %s/%s halted at %s[%d]@%d (%s)",
            event.tenant_id,
            event.run_id,
            delivered.topic,
            delivered.partition,
            delivered.offset,
            code,
        )
        self.context.dead_letter(delivered, code, detail)
        tp = delivered.source
        held = self._unconfirmed.get(tp)
        if held is None or delivered.offset < held:
            self._unconfirmed[tp] = delivered.offset

    # --- durability ----------------------------------------------------------------------------
    def flush(self) -> None:
        projections: list[RunProjection] = []
        halts: list[Halt] = []
        snapshots: list[ProjectionSnapshot] = []
        offsets: dict[Partition, int] = {}
        for tp, folder in self._folders.items():
            reached = self.context.checkpoint.position(tp)
            if reached is not None:  # messages dropped or dead-lettered move the offset on too
                folder.advance(reached)
            projections.extend(folder.pending.projections.values())
            halts.extend(folder.pending.halts)
            snapshots.extend(folder.pending.snapshots.values())
            if folder.next_offset is None:
                continue
            target = folder.next_offset
            held = self._unconfirmed.get(tp)
            if held is not None:
                target = min(target, held)
            if target != self._stored.get(tp):
                offsets[tp] = target
        if not (projections or halts or snapshots or offsets):
            self._unconfirmed.clear()
            return
        batch = ProjectionBatch(projections, halts, snapshots, offsets)
        try:
            unavailable_on_store_errors(self._what, lambda: self.store.apply_batch(batch))
        except StoreConflict:
            self.metrics.conflicts.inc()
            log.error(
                "projector: the store refused a write (another consumer moved on); "
                "stopping so that a restart seeks back to the stored offsets"
            )
            raise
        self._stored.update(offsets)
        self._unconfirmed.clear()
        for folder in self._folders.values():
            folder.committed()
        if snapshots:
            self.metrics.snapshots.inc(len(snapshots))

    def close(self) -> None:
        self.store.close()


def _fmt(tp: Partition, offset: int) -> str:
    where = "the beginning" if offset == OFFSET_BEGINNING else str(offset)
    return f"{tp[0]}[{tp[1]}] at {where}"
