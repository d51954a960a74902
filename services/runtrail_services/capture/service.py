"""``runtrail run capture``: every model and tool node of every run, as one record, durably.

Each delivered event goes to a :class:`~runtrail.capture.NodePairer` (one per topic); the
records it closes go to the sink chosen by URL. Offsets are committed by the runtime only
after :meth:`CaptureService.flush` made those records durable (fsync or upload), and never past
the first event of a node that is still open — each flush hands the pairer's holds to the
checkpoint, with metadata naming closed nodes that straddle them, and at assignment each
partition resumes from the group's commit and its metadata, so a restart re-forms exactly the
nodes it must and none of them truncated. Records carry deterministic IDs, so what a crash makes us write
twice is written identically and readers de-duplicate it.

Every event is fed, runtime type or not: the pairer ignores the others but counts their offsets,
which keeps its commit points level with the runtime's position.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from runtrail.capture import CaptureSink, Hold, NodeIoRecord, NodePairer
from runtrail.capture.pairer import wall_ms
from runtrail.persistence import open_store
from runtrail.persistence.kinds import CAPTURE_RECORDS
from runtrail.persistence.urls import redact_url
from runtrail.privacy.retention import prune_capture
from runtrail.privacy.retention_policy import retention_timer
from runtrail.runtime import Delivered, Partition, Service, ServiceContext
from runtrail_services.capture.metrics import CaptureMetrics
from runtrail_services.capture.settings import CaptureSettings

log = logging.getLogger(__name__)

#: Longest gap between two idle-expiry scans.
MAX_SCAN_INTERVAL_MS = 1000


class CaptureService(Service):
    """Pairs runtime events into node records and writes them to a capture sink."""

    name = "capture"
    reads_written = False  # events built straight from the bytes on the compiled path
    default_port = 9410

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.settings = CaptureSettings.load(context.options)
        url = self.settings.resolved_sink_url(context.settings.state_dir)
        self.sink: CaptureSink = open_store(CAPTURE_RECORDS, url, **self.settings.sink_options(url))
        self.metrics = CaptureMetrics(self.name, context.registry)
        self._pairers: dict[str, NodePairer] = {}
        self._idle_ms = int(self.settings.idle_flush_s * 1000)
        self._scan_every_ms = max(1, min(MAX_SCAN_INTERVAL_MS, self._idle_ms // 4))
        self._next_scan_ms = 0
        self.retention = retention_timer(
            context.settings, "capture", lambda cutoff_s: prune_capture(self.sink, cutoff_s)
        )
        log.info(
            "capture: sink %s, idle flush after %.1fs", redact_url(url), self.settings.idle_flush_s
        )

    def pairer(self, topic: str) -> NodePairer:
        """The pairer of one topic (partitions are numbered per topic)."""
        pairer = self._pairers.get(topic)
        if pairer is None:
            settings = self.context.settings
            pairer = self._pairers[topic] = NodePairer(
                window=settings.reorder_window, wait_ms=int(settings.reorder_wait_s * 1000)
            )
        return pairer

    # --- events -----------------------------------------------------------------------------
    def process(self, batch: Sequence[Delivered]) -> None:
        now = wall_ms()
        records: list[NodeIoRecord] = []
        pairers = self._pairers
        for delivered in batch:
            pairer = pairers.get(delivered.topic)
            if pairer is None:
                pairer = self.pairer(delivered.topic)
            closed = pairer.feed(delivered.event, delivered.partition, delivered.offset, now)
            if closed:
                records.extend(closed)
        if records:
            self._write(records)
        self._count_dropped()

    def _count_dropped(self) -> None:
        """Per batch: count and log the events that formed no part of a record."""
        for topic, pairer in self._pairers.items():
            if pairer.dropped:
                self.metrics.dropped(pairer.dropped)
                log.info("capture: %s: events in no record: %s", topic, dict(pairer.dropped))
                pairer.dropped.clear()

    def tick(self, now_ms: int) -> None:
        """Flush, marked incomplete, nodes idle longer than ``idle_flush_s``; update the gauge.

        The idle scan walks every open node, so it runs at most every ``_scan_every_ms``.
        Retention, when a policy is set, deletes the days older than it.
        """
        if self.retention is not None:
            self.retention.tick(now_ms)
        if now_ms >= self._next_scan_ms:
            self._next_scan_ms = now_ms + self._scan_every_ms
            expired: list[NodeIoRecord] = []
            for pairer in self._pairers.values():
                expired.extend(pairer.expire_idle(now_ms, self._idle_ms))
            if expired:
                log.info("capture: %d node(s) flushed by expiry", len(expired))
                self._write(expired)
            self._count_dropped()
        self.metrics.open_nodes.set(sum(p.open_nodes() for p in self._pairers.values()))
        self.metrics.buffered_events.set(sum(p.buffered_events() for p in self._pairers.values()))

    def _write(self, records: list[NodeIoRecord]) -> None:
        self.sink.write(records)
        self.metrics.written(records)

    # --- durability and commit points -----------------------------------------------------
    def flush(self) -> None:
        """Make the records durable, then hold the commit at the pairers' commit points."""
        try:
            with self.metrics.sink_flush_seconds.time():
                self.sink.flush()
        finally:
            self.context.checkpoint.set_holds(self._holds())

    def _holds(self) -> dict[Partition, Hold]:
        return {
            (topic, partition): hold
            for topic, pairer in self._pairers.items()
            for partition, hold in pairer.holds().items()
        }

    # --- membership -------------------------------------------------------------------------
    def on_assigned(self, partitions: Sequence[Partition]) -> None:
        """Restart each assigned partition at the group's commit, honouring its metadata."""
        for (topic, partition), (offset, metadata) in self.context.checkpoint.group_commits(
            partitions
        ).items():
            pairer = self.pairer(topic)
            if offset < 0:  # nothing committed yet: start clean wherever the reset policy says
                pairer.drop_partitions([partition])
                continue
            try:
                pairer.resume(partition, offset, metadata)
            except ValueError as exc:
                log.error(
                    "capture: %s[%d]: unreadable commit metadata (%s); nodes straddling offset "
                    "%d may be captured again, truncated",
                    topic,
                    partition,
                    exc,
                    offset,
                )
                pairer.resume(partition, offset, None)

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        for topic, numbers in by_topic.items():
            self.pairer(topic).drop_partitions(numbers)

    def close(self) -> None:
        self.sink.close()
