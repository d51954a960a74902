"""``audit``: seal every event into its run's hash chain, persist, publish, sign tree heads.

Guarantees, in the order a batch goes through them:

1. **Sealing** (:mod:`.sealing`): one chain per (tenant, run), in the order the topic holds the
   run's events, on heads read from the store on first sight of a run; an eventId already
   sealed in the tenant is never sealed again.
2. **Exactly-once into the store**: :meth:`flush` writes the new links *and* the consumer
   offsets that follow them in one transaction; :meth:`on_assigned` starts each partition
   where the store says (:mod:`.positions`, told to the checkpoint), so a crash neither skips
   nor double-seals.
3. **At-least-once to the audit topic**: after the commit the links are sent; their
   acknowledgement is awaited at the next flush (or revoke, or shutdown), and only then is
   their published position recorded, in that flush's transaction. A crash in between
   re-sends the same links (identical bytes) after restart.
4. **Tree heads**: every ``tree_head_interval_s`` (if the heads changed, and if no other
   member signed one meanwhile) a tree head over all run heads in the store is signed, kept
   in the store and published (best effort: the store holds every tree head); so is one of
   the transparency log (every link a leaf, :mod:`.transparency`), whose tiles are written.

A store that cannot take writes now (disk full, read-only, database down) raises
:class:`~runtrail.runtime.unavailable.StoreUnavailable` from :meth:`flush` and :meth:`tick`: the
transaction was rolled back, the sealer still holds the batch (and the published positions
already confirmed are kept for the retried transaction), and the runtime retries without
committing. A store refusing a batch (:class:`~runtrail.audit.errors.ChainConflict`: another writer
extended a chain this member was extending) stops the service without committing, visibly;
the next start re-reads the heads from the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from runtrail.audit.errors import ChainConflict
from runtrail.audit.note import NoteSigner
from runtrail.audit.store import StoredTreeHead
from runtrail.events import EventCodec
from runtrail.persistence.kinds import AUDIT_LINKS, AUDIT_TILES
from runtrail.persistence.registry import open_store
from runtrail.persistence.urls import redact_url
from runtrail.runtime import Delivered, Partition, Service, ServiceContext
from runtrail.runtime.store_errors import transient_store_errors, unavailable_on_store_errors
from runtrail_services.audit.heads import HeadCache
from runtrail_services.audit.log_api import LogApi
from runtrail_services.audit.metrics import AuditMetrics
from runtrail_services.audit.positions import (
    published_positions,
    sealed_positions,
    start_positions,
)
from runtrail_services.audit.publishing import AuditPublishError, AuditTopic, Outbox
from runtrail_services.audit.sealing import Sealer
from runtrail_services.audit.settings import AuditSettings
from runtrail_services.audit.signing import load_or_create_signer
from runtrail_services.audit.transparency import LogPublisher
from runtrail_services.audit.tree_heads import sign_and_store, tree_head_age_s
from runtrail_services.audit.witnessing import WitnessClient, witnesses_from

log = logging.getLogger(__name__)


class AuditService(Service):
    name = "audit"
    default_port = 9440
    #: the sealer writes each event's canonical bytes from its body (``Sealer._written``)
    reads_written = False

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        settings = context.settings
        self.audit = AuditSettings.load(context.options)
        url = self.audit.resolved_store_url(settings.state_dir)
        self.store = open_store(AUDIT_LINKS, url)
        self._what = f"audit store {redact_url(url)}"
        #: published positions confirmed by the topic but not yet written (a failed flush)
        self._unrecorded: dict[Partition, int] = {}
        #: per partition, the position the last flush stored (this assignment)
        self._stored: dict[Partition, int] = {}
        self.metrics = AuditMetrics(self.name, context.registry)
        self.heads = HeadCache(self.store, self.audit.max_cached_runs)
        # the chain hashes the form as written, made from the consumed body: the runtime
        # hands the events without it (reads_written below)
        codec = EventCodec(settings.extra_schema_dirs)
        self.sealer = Sealer(self.store, self.heads, context.dead_letter, codec.written_canonical)
        self.topic = AuditTopic(settings, settings.audit_topic) if self.audit.publish else None
        self.outbox = Outbox(self.topic) if self.topic is not None else None
        self.signer: NoteSigner | None = None
        self.log: LogPublisher | None = None
        if self.audit.tree_head_interval_s > 0:
            key_path = self.audit.resolved_key_path(settings.state_dir)
            self.signer = load_or_create_signer(key_path, self.audit.key_name)
        tiles = open_store(AUDIT_TILES, self.audit.resolved_tiles_url(settings.state_dir))
        if self.signer is not None:
            witnesses = witnesses_from(self.audit.witnesses)
            self.log = LogPublisher(
                self.store,
                self.signer,
                self.audit.log_origin,
                tiles,
                WitnessClient(witnesses) if witnesses else None,
                self.audit.witness_quorum,
            )
        self.log_api: LogApi | None = None
        if self.audit.log_http_enabled:
            self.log_api = LogApi(
                self.store, tiles, self.audit.log_http_host, self.audit.log_http_port
            )
            self.log_api.start()
        self._next_tree_head = 0.0
        self._started_seen = 0
        latest = self.store.latest_tree_head()
        if latest is not None:
            self.metrics.tree_head_seen(tree_head_age_s(latest, time.time()), latest.tree_head.size)
        log.info(
            "audit: store %s; publishing %s; tree heads %s",
            redact_url(url),
            f"to {settings.audit_topic}" if self.topic else "off",
            f"every {self.audit.tree_head_interval_s:g}s, key {self.signer.verifier.vkey()}"
            if self.signer
            else "on demand only",
        )

    # --- the batch path ------------------------------------------------------------------
    def process(self, batch: Sequence[Delivered]) -> None:
        counts = self.sealer.seal_batch(batch)
        if counts.redelivered:
            self.metrics.redelivered.inc(counts.redelivered)
        for reason, count in counts.refused.items():
            self.metrics.refused(reason, count)

    def flush(self) -> None:
        """Confirm the links sent last time; commit new links + offsets (+ those published
        positions) in one transaction; then send the new links, to confirm next time."""
        pending = self.sealer.pending
        reached = self._reached()
        if not pending.outgoing and not reached and not self.outbox and not self._unrecorded:
            return
        published = self._unrecorded = {**self._unrecorded, **self._confirm()}
        new = pending.new_links()
        # a replay that stopped inside its window must not pull the sealed position back
        replay = self.sealer.replay_until
        sealed = {tp: max(o, replay.get(tp, o)) for tp, o in reached.items()}
        positions = {**sealed_positions(sealed), **published_positions(published)}
        try:
            unavailable_on_store_errors(self._what, lambda: self.store.append_batch(new, positions))
        except ChainConflict:
            log.error(
                "audit: the store refused a batch (another writer extended a chain this "
                "member was sealing); stopping without commit, heads are re-read at restart"
            )
            self.heads.clear()
            raise
        self._unrecorded = {}
        self._stored.update(reached)
        self.metrics.sealed.inc(len(new))
        self.metrics.chains_started.inc(self.heads.started - self._started_seen)
        self._started_seen = self.heads.started
        if self.outbox is not None and reached:
            self.outbox.send(pending.all_links(), reached)
        self.sealer.flushed()
        self.heads.trim()
        self.metrics.cached_heads.set(len(self.heads))

    def _reached(self) -> dict[Partition, int]:
        """Per partition, the next offset to store where it moved since the last flush: the
        position the checkpoint reached, which counts the messages the runtime dead-lettered
        or dropped (no service sees them; stopping at the last sealed event would read them
        again after a restart), else the offset after the last event processed."""
        reached = dict(self.sealer.pending.offsets)
        for tp, position in self.context.checkpoint.positions().items():
            if position > reached.get(tp, -1):
                reached[tp] = position
        return {tp: o for tp, o in reached.items() if o != self._stored.get(tp)}

    def _confirm(self) -> dict[Partition, int]:
        """Positions whose links the audit topic has now acknowledged (raises if it did not)."""
        if self.outbox is None:
            return {}
        confirmed, links = self.outbox.confirm()
        self.metrics.published.inc(links)
        return confirmed

    def _record_published(self) -> None:
        """Confirm what is in flight and record it, outside a flush (revoke, shutdown)."""
        try:
            confirmed = self._confirm()
        except AuditPublishError as exc:
            log.error("audit: links not confirmed, they are sent again at restart: %s", exc)
            return
        if confirmed:
            try:
                self.store.append_batch([], published_positions(confirmed))
            except transient_store_errors() as exc:  # in a revoke: must not raise
                log.error("audit: published positions not recorded, sent again later: %s", exc)

    # --- partitions ----------------------------------------------------------------------
    def on_assigned(self, partitions: Sequence[Partition]) -> None:
        positions = start_positions(self.store, partitions, publishing=self.topic is not None)
        for partition in partitions:
            self._stored.pop(partition, None)
        for partition, offset in positions.start.items():
            self.context.checkpoint.start_at(partition, offset)
        for partition, sealed in positions.sealed.items():
            if positions.start[partition] < sealed:
                self.sealer.replay_until[partition] = sealed
                log.info(
                    "audit: %s[%d] re-publishes the links sealed below offset %d",
                    *partition,
                    sealed,
                )

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        self._record_published()  # so the next owner does not send these links again
        self.sealer.drop_partitions(partitions)
        for partition in partitions:
            self._stored.pop(partition, None)
        self.metrics.cached_heads.set(len(self.heads))

    # --- tree heads ---------------------------------------------------------------------
    def tick(self, now_ms: int) -> None:
        if self.signer is None:
            return
        now = time.time()  # wall clock: compared with the stored tree heads' timestamps
        if now < self._next_tree_head:
            return
        interval = self.audit.tree_head_interval_s
        latest = self.store.latest_tree_head()
        if latest is not None:
            age = tree_head_age_s(latest, now)
            self.metrics.tree_head_seen(age, latest.tree_head.size)
            if age < interval:  # signed meanwhile by another member or the CLI
                self._next_tree_head = now + interval - age
                return
        unavailable_on_store_errors(self._what, self.sign_tree_heads)
        self._next_tree_head = now + interval

    def sign_tree_heads(self) -> StoredTreeHead | None:
        """Sign the store's heads now (if they changed) and publish the tree head; sign the
        transparency log's checkpoint (if it grew) and write its tiles."""
        assert self.signer is not None
        if self.log is not None:
            self.log.publish()
        signed = sign_and_store(self.store, self.signer, self.audit.origin, only_if_changed=True)
        self.metrics.chains.set(signed.tree_head.size)
        stored = signed.stored
        if stored is None:
            return None
        self.metrics.tree_heads.inc()
        self.metrics.tree_head_seen(0.0, stored.tree_head.size)
        log.info(
            "audit: signed tree head %d over %d runs", stored.tree_head_id, stored.tree_head.size
        )
        if self.topic is not None:
            try:
                self.topic.send_tree_head(stored)
                self.topic.confirm()
            except AuditPublishError as exc:
                log.error(
                    "audit: tree head %d kept but not published: %s", stored.tree_head_id, exc
                )
        return stored

    def close(self) -> None:
        if self.log_api is not None:
            self.log_api.stop()
        self._record_published()
        if self.topic is not None:
            self.topic.close()
        self.store.close()
