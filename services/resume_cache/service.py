"""``runtrail run resume-cache``: cache entries and intents from the event stream, served.

Consumes the events topic; an :class:`~runtrail.resume.builder.EntryBuilder` pairs MODEL
requests/responses (closed at STEP_END) and TOOL calls/results into entries, and keeps TOOL_CALLs
without a result as open intents. At flush the batch goes to the compacted cache topic
(acknowledged) and then into the store, **with the consumed offsets in the same transaction**;
``on_assigned`` returns those offsets, so the store is exactly-once however the process dies,
and the open state of each partition is loaded back from the store with them.

Lookups are served on their own port (:mod:`.http_api`), from the store plus what is consumed
but not yet flushed (:mod:`.index`), with read-your-writes waits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from runtrail.http_server import TokenAuth
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.resume.store import CacheStore, open_store, redact_url
from runtrail.runtime import Delivered, Partition, Service, ServiceContext
from runtrail_services.resume_cache.http_api import LookupServer
from runtrail_services.resume_cache.index import LookupIndex
from runtrail_services.resume_cache.metrics import ResumeCacheMetrics
from runtrail_services.resume_cache.settings import ResumeCacheSettings
from runtrail_services.resume_cache.topic_writer import (
    CacheTopicWriter,
    batch_records,
    ensure_cache_topic,
)

log = logging.getLogger(__name__)

#: Runs silent this long are forgotten by the sequencer (and how often it looks for them).
FORGET_RUNS_MS = 10 * 60 * 1000


class ResumeCacheService(Service):
    """See the module docstring."""

    name = "resume-cache"
    default_port = 9420

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.settings = ResumeCacheSettings.load(context.options)
        self.events_topic = context.settings.events_topic
        url = self.settings.resolved_store_url(context.settings.state_dir)
        self.store: CacheStore = open_store(url, readers=self.settings.readers)
        self.metrics = ResumeCacheMetrics(self.name, context.registry)
        self.builder = EntryBuilder(
            window=context.settings.reorder_window,
            wait_ms=int(context.settings.reorder_wait_s * 1000),
            anchor=self._applied_sequence,
        )
        #: per partition, the next offset to read (what the store may record once applied)
        self._read: dict[int, int] = {}
        self._next_forget_ms = 0
        self.index = LookupIndex(self.store, self.events_topic)
        self.writer: CacheTopicWriter | None = None
        if self.settings.publish_topic:
            ensure_cache_topic(context.settings)
            self.writer = CacheTopicWriter(context.settings)
        tokens = self.settings.tenant_tokens()
        if not tokens:
            log.warning("resume-cache: no tenant tokens configured; every lookup will be refused")
        self.http = LookupServer(
            self.settings.http_host,
            self.settings.http_port,
            self.index,
            TokenAuth(tokens),
            self.metrics,
            self.settings.wait_timeout_ms,
        )
        self.http.start()
        log.info(
            "resume-cache: store %s, lookups on %s:%d, cache topic %s",
            redact_url(url),
            self.settings.http_host,
            self.http.port,
            context.settings.resume_cache_topic if self.writer else "(off)",
        )

    # --- events ---------------------------------------------------------------------------
    def _applied_sequence(self, tenant: str, run_id: str) -> int | None:
        """The run's last applied sequence in the store: where its order resumes."""
        last = self.store.run_state(tenant, run_id).last_sequence
        return last if last > 0 else None

    def process(self, batch: Sequence[Delivered]) -> None:
        delta = WriteBatch()
        feed = self.builder.feed
        now = int(time.time() * 1000)
        for delivered in batch:
            feed(delivered.event, delivered.partition, delta, delivered.offset, now)
            self._read[delivered.partition] = delivered.offset + 1
        self._publish(delta, {d.partition for d in batch})

    def tick(self, now_ms: int) -> None:
        """Give up sequence waits on quiet partitions, so what waits behind them is applied;
        now and then forget idle runs (the store's last sequence re-anchors them)."""
        forget = now_ms >= self._next_forget_ms
        if not forget and not self.builder.buffered():
            return
        if forget:
            self._next_forget_ms = now_ms + FORGET_RUNS_MS
        delta = WriteBatch()
        self.builder.expire(now_ms, delta, FORGET_RUNS_MS if forget else None)
        self._publish(delta, set(self._read))

    def _publish(self, delta: WriteBatch, partitions: set[int]) -> None:
        """Make a delta visible, with offsets that never pass an event not yet applied."""
        positions: dict[int, int] = {}
        for partition in partitions:
            position = self._read[partition]
            floor = self.builder.floor(partition)
            positions[partition] = position if floor is None else min(position, floor)
            delta.offsets[(self.events_topic, partition)] = positions[partition]
        if self.builder.dropped:
            log.info("resume-cache: events or nodes not applied: %s", dict(self.builder.dropped))
            self.builder.dropped.clear()
        for entry in delta.entries.values():
            self.metrics.entries.labels(self.name, entry.kind.value).inc()
        for held in delta.intents.values():
            self.metrics.intents.labels(self.name, "closed" if held is None else "opened").inc()
        self.index.consumed(delta, positions)

    def flush(self) -> None:
        batch = self.index.pending()
        if not batch:
            return
        if self.writer is not None:
            data, positions = batch_records(batch, self.events_topic)
            self.writer.write(data)
            self.writer.write(positions)
            self.metrics.topic_records.labels(self.name).inc(len(data) + len(positions))
        self.store.apply(batch, self.events_topic)
        self.index.flushed(batch)

    # --- membership -------------------------------------------------------------------------
    def on_assigned(self, partitions: Sequence[Partition]) -> Mapping[Partition, int]:
        """Start where the store is durable, with the open state it holds for those partitions."""
        mine = [p for t, p in partitions if t == self.events_topic]
        stored = self.store.offsets(self.events_topic)
        models, intents = self.store.open_state(self.events_topic, mine)
        self.builder.drop_partitions(mine)
        self.builder.load(models, intents)
        for p in mine:
            self._read.pop(p, None)
        starts = {(self.events_topic, p): stored[p] for p in mine if p in stored}
        self.index.assigned({p: stored.get(p, 0) for p in mine})
        log.info(
            "resume-cache: assigned %s; %d open model node(s), %d open intent(s) restored",
            sorted(mine),
            len(models),
            len(intents),
        )
        return starts

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        mine = [p for t, p in partitions if t == self.events_topic]
        self.builder.drop_partitions(mine)
        for p in mine:
            self._read.pop(p, None)
        self.index.revoked(mine)

    def close(self) -> None:
        self.http.stop()
        if self.writer is not None:
            self.writer.close()
        self.store.close()
