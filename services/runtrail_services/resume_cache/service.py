"""``runtrail run resume-cache``: cache entries and intents from the event stream, served.

Consumes the events topic; an :class:`~runtrail.resume.builder.EntryBuilder` pairs MODEL
requests/responses (closed at STEP_END) and TOOL calls/results into entries, and keeps TOOL_CALLs
without a result as open intents. At flush the batch goes to the compacted cache topic
(acknowledged) and then into the store, **with the consumed offsets in the same transaction**;
``on_assigned`` starts each partition there (``checkpoint.start_at``), so the store is
exactly-once however the process dies, and the open state of each partition is loaded back
from the store with them.

An erasure (``run.content_erased``) drops what the pending batch holds of it
(:meth:`LookupIndex.erase`) and deletes the store's entries, intents and open model nodes of the
erased run, or holding the destroyed key's references, in the transaction of the next flush
(``CacheStore.apply``), tombstoning them on the cache topic first; ``runtrail erase`` deleted
them already from the store it was given (:mod:`runtrail.privacy.erased_cache`), this catches
what the service flushed since. A hit whose answer no longer opens is never served
(``_unanswerable_check``).

Lookups are served on their own port (:mod:`.http_api`), from the store plus what is consumed
but not yet flushed (:mod:`.index`), with read-your-writes waits that end as soon as the
checkpoint says the consume loop is past the named offsets (it counts dead-lettered and
dropped messages too: :meth:`ResumeCacheService._reached` watches it).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import orjson

from runtrail.config import Settings
from runtrail.events import Event
from runtrail.events.domain_events import ContentErased
from runtrail.http_server import TokenAuth
from runtrail.nodes import RunSequencer
from runtrail.persistence import open_store, redact_url
from runtrail.persistence.kinds import RESUME_ENTRIES
from runtrail.privacy.reference import key_marker
from runtrail.privacy.retention import prune_cache_entries
from runtrail.privacy.retention_policy import retention_timer
from runtrail.privacy.topic_tombstones import write_tombstones
from runtrail.resume.builder import EntryBuilder, ModelNode, WriteBatch
from runtrail.resume.entry import CacheEntry, Intent
from runtrail.resume.keys import Kind
from runtrail.resume.records import Record, entry_tombstone, intent_tombstone
from runtrail.resume.store import CacheErasure, CacheStore, StoredEntryKey
from runtrail.runtime import Delivered, Partition, Service, ServiceContext
from runtrail.runtime.store_errors import unavailable_on_store_errors
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
    reads_written = False  # events built straight from the bytes on the compiled path
    default_port = 9420

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.settings = ResumeCacheSettings.load(context.options)
        self.events_topic = context.settings.events_topic
        url = self.settings.resolved_store_url(context.settings.state_dir)
        self.store: CacheStore = open_store(RESUME_ENTRIES, url, readers=self.settings.readers)
        self._store_name = redact_url(url)
        self.metrics = ResumeCacheMetrics(self.name, context.registry)
        self.builder = EntryBuilder(
            RunSequencer(
                window=context.settings.reorder_window,
                wait_ms=int(context.settings.reorder_wait_s * 1000),
                anchor=self._applied_sequence,
            ),
            open_content=_content_opener(context.settings),
        )
        self.context.checkpoint.watch(self._reached)
        self._next_forget_ms = 0
        self.index = LookupIndex(
            self.store, self.events_topic, _unanswerable_check(context.settings)
        )
        #: erasures consumed since the last flush, applied with it (one transaction)
        self._erasures: list[CacheErasure] = []
        self.writer: CacheTopicWriter | None = None
        if self.settings.publish_topic:
            ensure_cache_topic(context.settings)
            self.writer = CacheTopicWriter(context.settings, on_too_large=self._too_large)
        self.retention = retention_timer(context.settings, "resumeCache", self._prune)
        #: the event that produced each pending entry/intent, for a too-large dead letter
        self._sources: dict[tuple[object, ...], Delivered] = {}
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
        held = self.index.pending().runs.get((tenant, run_id))  # applied, not yet flushed
        if held is not None:
            last = max(last, held[0])
        return last if last > 0 else None

    def process(self, batch: Sequence[Delivered]) -> None:
        delta = WriteBatch()
        feed = self.builder.feed
        entries, intents, sources = delta.entries, delta.intents, self._sources
        now = int(time.time() * 1000)
        for delivered in batch:
            made = (len(entries), len(intents))
            feed(delivered.event, delivered.partition, delta, delivered.offset, now)
            if (len(entries), len(intents)) != made:  # only when an entry/intent appears
                _remember(sources, entries, made[0], delivered)
                _remember(sources, intents, made[1], delivered)
            if delivered.event.type == ContentErased.event_type:
                erasure = _erasure_of(delivered.event)
                if erasure:
                    self._publish(delta)  # what came before it, so it is dropped with it
                    delta = WriteBatch()
                    entries, intents = delta.entries, delta.intents
                    self.index.erase(erasure)
                    self._erasures.append(erasure)
        self._publish(delta)

    def _reached(self, positions: Mapping[Partition, int]) -> None:
        """After each batch (the checkpoint's watcher), the next offsets reached *including*
        messages the runtime dead-lettered or dropped: read-your-writes waits end there, and
        the store keeps them (held back to the first event still waiting for its run's order)."""
        self.index.advanced(self._held_back(self._read(positions)))

    def _read(self, positions: Mapping[Partition, int]) -> dict[int, int]:
        """The positions of the events topic, by partition number."""
        return {p: o for (t, p), o in positions.items() if t == self.events_topic}

    def tick(self, now_ms: int) -> None:
        """Give up sequence waits on quiet partitions, so what waits behind them is applied;
        now and then forget idle runs (the store's last sequence re-anchors them); apply the
        retention policy when due."""
        if self.retention is not None:
            self.retention.tick(now_ms)
        forget = now_ms >= self._next_forget_ms
        if not forget and not self.builder.buffered():
            return
        if forget:
            self._next_forget_ms = now_ms + FORGET_RUNS_MS
        delta = WriteBatch()
        self.builder.expire(now_ms, delta, FORGET_RUNS_MS if forget else None)
        self._publish(delta)
        self.index.advanced(self._held_back(self._read(self.context.checkpoint.positions())))

    def _prune(self, cutoff_s: float) -> int:
        """Entries written before ``cutoff_s``, tombstoned on the cache topic first."""
        return prune_cache_entries(self.store, cutoff_s, self._forget if self.writer else None)

    def _forget(self, keys: Sequence[StoredEntryKey]) -> None:
        """Tombstones of pruned entries, acknowledged before the store deletes them. Their own
        producer: the service's writer may hold a batch it is retrying."""
        records = dict(entry_tombstone(*key) for key in keys)
        write_tombstones(
            self.context.settings, self.context.settings.resume_cache_topic, dict.fromkeys(records)
        )

    def _held_back(self, positions: Mapping[int, int]) -> dict[int, int]:
        """Positions that never pass an event not yet applied (one waiting for a gap)."""
        held: dict[int, int] = {}
        for partition, position in positions.items():
            floor = self.builder.floor(partition)
            held[partition] = position if floor is None else min(position, floor)
        return held

    def _publish(self, delta: WriteBatch) -> None:
        """Make a delta visible to lookups (its positions follow in :meth:`_reached`)."""
        if self.builder.dropped:
            log.info("resume-cache: events or nodes not applied: %s", dict(self.builder.dropped))
            self.builder.dropped.clear()
        for entry in delta.entries.values():
            self.metrics.entries.labels(self.name, entry.kind.value).inc()
        for held in delta.intents.values():
            self.metrics.intents.labels(self.name, "closed" if held is None else "opened").inc()
        self.index.consumed(delta)

    def flush(self) -> None:
        batch = self.index.pending()
        erasures = list(self._erasures)
        if not batch and not erasures:
            return
        if self.writer is not None:
            data, positions = batch_records(batch, self.events_topic)
            if erasures:  # the topic's copies go too, before the store forgets which
                data = self._erased_records(erasures) + data
            self.writer.write(data)
            self.writer.write(positions)
            self.metrics.topic_records.labels(self.name).inc(len(data) + len(positions))
        unavailable_on_store_errors(
            f"resume-cache store {self._store_name}",
            lambda: self.store.apply(batch, self.events_topic, erasures),
        )
        if self.writer is not None:
            self.writer.batch_done()
        self.index.flushed(batch)
        self._sources.clear()
        if erasures:
            del self._erasures[: len(erasures)]
            log.info("resume-cache: applied %d erasure(s) to the store", len(erasures))

    def _erased_records(self, erasures: Sequence[CacheErasure]) -> list[Record]:
        """Tombstones of the stored entries and intents ``erasures`` cover: one an erasure
        command wrote may predate the service's own write of the same record."""
        records: dict[bytes, bytes | None] = {}
        for erasure in erasures:
            held = unavailable_on_store_errors(
                f"resume-cache store {self._store_name}", partial(self.store.holding, erasure)
            )
            records.update(entry_tombstone(*key) for key in held.entries)
            records.update(intent_tombstone(*key) for key in held.intents)
        return list(records.items())

    def _too_large(self, record_key: bytes, detail: str) -> None:
        """A record the cache topic refuses for its size: dead-letter the event behind it (the
        store still keeps the entry, so lookups answer it) and go on."""
        parts = orjson.loads(record_key)
        key: tuple[object, ...] = ()
        if parts[0] == "entry":
            key = (parts[1], parts[2], Kind(parts[3]), parts[4])
        elif parts[0] == "intent":
            key = tuple(parts[1:])
        delivered = self._sources.get(key)
        if delivered is not None:
            self.context.dead_letter(delivered, "too-large", detail)
        else:
            log.error("resume-cache: %s (no event to dead-letter for %s)", detail, parts[0])

    # --- membership -------------------------------------------------------------------------
    def on_assigned(self, partitions: Sequence[Partition]) -> None:
        """Start where the store is durable, with the open state it holds for those partitions."""
        mine = [p for t, p in partitions if t == self.events_topic]
        stored = self.store.offsets(self.events_topic)
        models, intents = self._open_state(mine)
        self.builder.drop_partitions(mine)
        self.builder.load(models, intents)
        for p in mine:
            if p in stored:
                self.context.checkpoint.start_at((self.events_topic, p), stored[p])
        self.index.assigned({p: stored.get(p, 0) for p in mine})
        log.info(
            "resume-cache: assigned %s; %d open model node(s), %d open intent(s) restored",
            sorted(mine),
            len(models),
            len(intents),
        )

    def _open_state(self, mine: list[int]) -> tuple[list[ModelNode], list[tuple[Intent, int]]]:
        """The open nodes and intents of ``mine``: the store's, overlaid with what is applied
        but not yet flushed (a batch pending since an outage). The run anchors read the same
        overlay, so a re-read skips exactly what this state already holds."""
        stored_models, stored_intents = self.store.open_state(self.events_topic, mine)
        pending = self.index.pending()
        owned = set(mine)
        models = {node.node_key: node for node in stored_models}
        for key, node in pending.models.items():
            if node is None:
                models.pop(key, None)
            elif node.partition in owned:
                models[key] = node
        intents = {(i.tenant_id, i.run_id, i.intent_id): (i, p) for i, p in stored_intents}
        for ikey, held in pending.intents.items():
            if held is None:
                intents.pop(ikey, None)
            elif held[1] in owned:
                intents[ikey] = held
        return list(models.values()), list(intents.values())

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        mine = [p for t, p in partitions if t == self.events_topic]
        self.builder.drop_partitions(mine)
        self.index.revoked(mine)

    def close(self) -> None:
        self.http.stop()
        if self.writer is not None:
            self.writer.close()
        self.store.close()


def _remember(
    sources: dict[tuple[object, ...], Delivered],
    keys: dict[Any, Any],
    before: int,
    delivered: Delivered,
) -> None:
    """Note ``delivered`` as the source of the keys added after the first ``before``."""
    for key in itertools.islice(reversed(keys.keys()), len(keys) - before):
        sources.setdefault(key, delivered)


def _erasure_of(event: Event) -> CacheErasure:
    """What a ``run.content_erased`` event covers in the cache: the run (a run's erasure) and
    whatever holds the destroyed key's references (any erasure that destroyed a key)."""
    data = event.data
    if not isinstance(data, ContentErased):
        return CacheErasure(event.tenant_id)
    runs = (event.run_id,) if data.scope == "run" else ()
    marker = key_marker(data.key_id) if data.key_id else None
    return CacheErasure(event.tenant_id, runs, marker)


def _unanswerable_check(settings: Settings) -> Callable[[CacheEntry], bool] | None:
    """With a content store configured: whether an entry's answer holds content that no
    longer opens (erased or pruned: it would read ``[erased]``), opened by a resolver of the
    lookups' own (the HTTP threads take turns on it). Without one: None, nothing is checked
    (the service cannot open references at all)."""
    if not settings.content_store_url:
        return None
    import threading

    from runtrail.privacy.reference import PREFIX
    from runtrail.privacy.resolve import holds_erased, resolver_from_settings

    resolver = resolver_from_settings(settings)
    lock = threading.Lock()

    def unanswerable(entry: CacheEntry) -> bool:
        if PREFIX not in orjson.dumps(entry.result).decode():
            return False
        with lock:
            opened = resolver.value(entry.tenant_id, entry.result)
        return holds_erased(opened)

    return unanswerable


def _content_opener(settings: Settings) -> Callable[[str, Any], Any] | None:
    """Resolves protected content for keying, when a content store is configured."""
    if not settings.content_store_url:
        return None
    from runtrail.privacy.resolve import resolver_from_settings

    return resolver_from_settings(settings).value
