"""``runtrail run sessions``: the latest snapshot of every agent session, from the stream.

Each event that names a session (``sessionId`` in its envelope) is applied to that session's
:class:`~runtrail.sessions.AgentSession`: the event log comes from the stream, memory and
compact results from the ``session.snapshot`` events the agent publishes. A session is
saved to the store (file or PostgreSQL) every N unsaved events, at STEP_END, when it
has been quiet, and when its partitions are revoked or the service stops. A save that an
event makes due is made at the end of the consumed batch (:meth:`tick`, which the runtime
calls after the batch's chunks), with the batch's other saves: one fsync per folder for them
all. Then:

* **Commit only after durable.** Until a session is saved, the offset of its first unsaved
  event is held (each :meth:`flush` tells the offsets' checkpoint): the runtime commits no
  further, so a crash re-reads exactly what the store lacks. Re-applying what the store has is a no-op (events are keyed
  by run and sequence).
* **One session, several writers.** A session's runs may sit on partitions owned by different
  members. A save is compare-and-set on the digest the member last saw; if another member
  saved meanwhile, its snapshot is merged (a union of events) and the save retried, so no
  member's events are lost.
* **Pointers.** Once saved, the latest snapshot of each session goes to the compacted sessions
  topic — inline, or uploaded to object storage and referenced with its digest when it is
  large — and is flushed before offsets are committed.
* **A store or topic that cannot take writes** (disk full, read-only folder, database or
  broker down) is not an event's fault: the sessions stay in memory with their offsets held,
  :meth:`flush` raises ``StoreUnavailable`` (the runtime reports not ready, commits nothing
  and retries) and the service goes on when the store answers again.
* **Untrusted snapshots halt their session, visibly.** A stored snapshot that is corrupted or
  built by another code version is not built upon, and one edited while the session is held
  in memory is not overwritten: ``save_if`` verifies the stored content (not only its digest
  field) before replacing it, so the edited file or row stays as evidence. The session is not
  saved, its offsets are held (so nothing is lost), it is counted in
  ``runtrail_sessions_halted``, logged, and the session API answers 409 with the reason.
  Repair: ``runtrail sessions rebuild ID`` (from the topic), then restart the service.
* **An erasure drops what it covers.** On a ``run.content_erased`` event, the sessions held in
  memory that applied the erased run or hold the destroyed key's references are dropped
  unsaved and their stored copies deleted again, so the next event of such a session does not
  save the erased content back (:mod:`runtrail_services.sessions.erasure`).

The runtime gives no signal before its last commit at shutdown, so the shutdown save
happens when the partitions are revoked (or in :meth:`close`); a restart then re-reads the
events after the last commit and finds them already saved.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Sequence

from runtrail.events import Event
from runtrail.events.domain_events import ContentErased
from runtrail.persistence import open_store
from runtrail.persistence.kinds import SESSION_SNAPSHOTS
from runtrail.privacy.resolve import resolver_from_settings
from runtrail.privacy.retention import prune_session_blobs, prune_sessions
from runtrail.privacy.retention_policy import retention_timer
from runtrail.runtime import Delivered, Partition, Service, ServiceContext
from runtrail.runtime.store_errors import transient_store_errors
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail.sessions import (
    AgentSession,
    AgentSessionSnapshot,
    CorruptSnapshot,
    SessionStoreError,
    UntrustedSnapshot,
)
from runtrail.sessions.blobs import SnapshotBlobStore
from runtrail_services.sessions.erasure import SessionKey, erased_sessions
from runtrail_services.sessions.http_api import SessionsApi
from runtrail_services.sessions.metrics import SessionsMetrics
from runtrail_services.sessions.pointers import PointerPublisher
from runtrail_services.sessions.retention import owned_timers
from runtrail_services.sessions.settings import SessionsSettings
from runtrail_services.sessions.tracking import SavePolicy, Tracked

log = logging.getLogger(__name__)


#: What an unreachable, full or read-only store raises (corrupt or untrusted snapshots are
#: subclasses of SessionStoreError but are caught first: they halt their session).
def store_down() -> tuple[type[Exception], ...]:
    return (*transient_store_errors(), SessionStoreError)


#: Longest gap between two scans for idle sessions.
SCAN_INTERVAL_MS = 1000


def wall_ms() -> int:
    return int(time.time() * 1000)


class SessionsService(Service):
    """Keeps sessions from the stream and saves their snapshots; see the module docstring."""

    name = "sessions"
    reads_written = False  # events built straight from the bytes on the compiled path
    #: each batch's saves are made durable together (one fsync per folder) at its tick:
    #: smaller batches mean more of those, and 250 halved its rate
    batch_size = 2000
    keeps_state = True  # every session's event log, until it is evicted
    default_port = 9430

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.settings = SessionsSettings.load(context.options)
        state_dir = context.settings.state_dir
        self.metrics = SessionsMetrics(self.name, context.registry)
        self.store = open_store(SESSION_SNAPSHOTS, self.settings.resolved_store_url(state_dir))
        self.policy = SavePolicy(
            every_n_events=self.settings.every_n_events,
            at_step_end=self.settings.at_step_end,
            idle_ms=int(self.settings.idle_save_s * 1000),
        )
        self._evict_ms = int(self.settings.evict_after_s * 1000)
        self._sessions: dict[SessionKey, Tracked] = {}
        #: the sessions the events processed since the last tick made due: saved there
        self._due: dict[SessionKey, Tracked] = {}
        self._next_scan_ms = 0
        #: the last error of a store that could not take a write (None: it did)
        self._store_error: Exception | None = None
        self.pointers: PointerPublisher | None = None
        if self.settings.publish_pointers:
            blobs = SnapshotBlobStore(self.settings.resolved_blob_url(state_dir))
            self.pointers = PointerPublisher(
                context.settings, blobs=blobs, inline_limit=self.settings.inline_limit_bytes
            )
        checkpoints_url = self.settings.resolved_checkpoints_url(state_dir)
        own = retention_timer(context.settings, "sessions", self._prune)
        #: the snapshots' timer, then the content store's and the checkpoints'
        self.retention = [
            t for t in (own, *owned_timers(context.settings, checkpoints_url)) if t is not None
        ]
        self.api: SessionsApi | None = None
        if self.settings.http_enabled:
            self.api = SessionsApi(
                self.store,
                self.settings.http_tokens,
                self.settings.http_host,
                self.settings.http_port,
                halted=self.halted_reason,
                resolver=resolver_from_settings(context.settings),
                on_request=lambda status: self.metrics.http_requests.labels(
                    self.name, str(status)
                ).inc(),
            )
            self.api.start()
        log.info(
            "sessions: store %s; save every %d events%s; session API on %s:%s",
            self.store.describe(),
            self.settings.every_n_events,
            " and at STEP_END" if self.settings.at_step_end else "",
            self.settings.http_host,
            self.api.port if self.api else "off",
        )

    # --- sessions in memory -------------------------------------------------------------------
    def tracked(self, tenant_id: str, session_id: str, now_ms: int) -> Tracked:
        """The session in memory, loaded from the store the first time it is seen."""
        key = (tenant_id, session_id)
        found = self._sessions.get(key)
        if found is not None:
            return found
        session = AgentSession(tenant_id, session_id)
        tracked = Tracked(session=session, stored_digest=None, touched_ms=now_ms)
        try:
            stored = self.store.load(tenant_id, session_id)
            if stored is not None:
                session.restore(stored)
                tracked.stored_digest = stored.digest
                tracked.unpublished = stored  # a crash may have come between save and pointer
        except (CorruptSnapshot, UntrustedSnapshot) as exc:
            self._halt(tracked, exc)
        except store_down() as exc:
            # Unreachable or unreadable now: go on with an empty session; its first save is
            # then a conflict with what is stored, which is merged in (see _save), and until
            # the store answers, flush raises StoreUnavailable and nothing is committed.
            self._store_down(exc)
        self._sessions[key] = tracked
        if tracked.halted:
            self._update_gauges()
        else:  # only the count changed: a recount of the halted was a pass over every session
            self.metrics.tracked.set(len(self._sessions))
        return tracked

    def _halt(self, tracked: Tracked, exc: Exception) -> None:
        """Stop saving a session whose stored snapshot cannot be trusted; its offsets
        stay held, so after the repair a restart re-reads what it did not save."""
        # the API shows the reason, not the path or row (those stay in the log)
        if isinstance(exc, CorruptSnapshot):
            tracked.halted = exc.reason
        else:
            tracked.halted = "the stored snapshot is untrusted (see the service log)"
        session = tracked.session
        log.error(
            "sessions: %s/%s halted (repair: runtrail sessions rebuild, then restart): %s",
            session.tenant_id,
            session.session_id,
            exc,
        )
        self._update_gauges()

    def halted_reason(self, tenant_id: str, session_id: str) -> str | None:
        """Why a session is halted (None if it is not): what the session API reports."""
        found = self._sessions.get((tenant_id, session_id))
        return found.halted if found is not None else None

    def _update_gauges(self) -> None:
        self.metrics.tracked.set(len(self._sessions))
        self.metrics.halted.set(sum(1 for t in self._sessions.values() if t.halted))

    # --- events -------------------------------------------------------------------------------
    def process(self, batch: Sequence[Delivered]) -> None:
        """Apply the events; the sessions they make due are saved at the next :meth:`tick`
        (or :meth:`flush`), with the rest of the consumed batch's."""
        now = wall_ms()
        touched: dict[SessionKey, Tracked] = {}
        due = self._due
        for delivered in batch:
            event = delivered.event
            if event.type == ContentErased.event_type:
                self._drop_erased(event, touched)
            if not event.session_id:  # not part of a session
                continue
            key = (event.tenant_id, event.session_id)
            tracked = touched.get(key) or self.tracked(*key, now)
            touched[key] = tracked
            tracked.touched_ms = now
            if tracked.halted:
                tracked.held(delivered.source, delivered.offset)
                continue
            source = (delivered.topic, delivered.partition, delivered.offset)
            if tracked.session.apply(event, source=source):
                tracked.held(delivered.source, delivered.offset)
                tracked.unsaved += 1
                if not tracked.due:
                    tracked.due = self.policy.after_event(tracked, event.type)
                if tracked.due:
                    due[key] = tracked

    def _drop_erased(self, event: Event, touched: dict[SessionKey, Tracked]) -> None:
        """Drop, unsaved, the sessions an erasure covers, and delete their stored copies
        again (:mod:`runtrail_services.sessions.erasure`); a store or topic that cannot
        take it now is logged: the erasure's own deletions stand."""
        cannot: tuple[type[Exception], ...] = (*store_down(), StoreUnavailable)
        for key in erased_sessions(self._sessions.items(), event):
            del self._sessions[key]
            touched.pop(key, None)
            self._due.pop(key, None)
            try:
                self.store.delete(*key)
                if self.pointers is not None:
                    self.pointers.forget([key])
                    if self.pointers.blobs is not None:
                        self.pointers.blobs.delete_session(*key)
            except cannot as exc:
                log.warning(
                    "sessions: erased %s/%s: stored copies not deleted again: %s", *key, exc
                )
            log.info("sessions: %s/%s dropped: its content was erased", *key)
        self._update_gauges()

    def _save_all(self, sessions: Iterable[Tracked], trigger: str | None = None) -> None:
        """Save the dirty sessions; if the store cannot take writes now, leave them due (and
        their offsets held) for :meth:`flush` to retry, and stop trying for now.

        The saves are durable together, at the end (``durable_on_exit``: one folder fsync
        per folder, not per save). Should that last step fail, the store keeps it due and
        :meth:`flush`, which runs before every commit, raises until it is done: no offset is
        committed past a save that is not durable."""
        try:
            with self.store.durable_on_exit():
                self._save_each(sessions, trigger)
        except store_down() as exc:
            self._store_down(exc)

    def _save_each(self, sessions: Iterable[Tracked], trigger: str | None) -> None:
        """One attempt for every dirty session, overlapped by the store (``save_all_if``);
        a session another writer saved meanwhile then goes through :meth:`_save`."""
        todo = [t for t in sessions if not t.halted and t.dirty]
        if not todo:
            return
        built: list[AgentSessionSnapshot] = []

        def attempts() -> Iterator[tuple[AgentSessionSnapshot, str | None]]:
            for tracked in todo:
                built.append(tracked.session.snapshot())
                yield built[-1], tracked.stored_digest

        started = time.perf_counter()
        outcomes = self.store.save_all_if(attempts())
        each = (time.perf_counter() - started) / max(len(outcomes), 1)
        # the items with no outcome were not tried (the store failed a write): they stay due
        for tracked, snapshot, outcome in itertools.zip_longest(todo, built, outcomes):
            reason = trigger or tracked.due or "flush"
            if outcome is None or snapshot is None:
                tracked.due = tracked.due or reason
            elif outcome is True:
                self.metrics.save_seconds.observe(each)
                tracked.saved(snapshot)
                self.metrics.saved(reason, len(snapshot.to_bytes()))
            elif isinstance(outcome, (CorruptSnapshot, UntrustedSnapshot)):
                self._halt(tracked, outcome)  # edited behind our back: kept as evidence
            elif isinstance(outcome, store_down()):
                tracked.due = tracked.due or reason
                self._store_down(outcome)
            elif isinstance(outcome, Exception):
                raise outcome
            else:
                self.metrics.save_conflicts.inc()
                try:
                    self._save(tracked, reason, after_conflict=True)
                except store_down() as exc:
                    tracked.due = tracked.due or reason
                    self._store_down(exc)

    def _store_down(self, exc: Exception) -> None:
        if self._store_error is None:
            log.warning("sessions: store %s cannot take writes now: %s", self.store.describe(), exc)
        self._store_error = exc

    def _save(self, tracked: Tracked, trigger: str, *, after_conflict: bool = False) -> None:
        """Save durably (compare-and-set, merging another writer's snapshot if needed).
        ``after_conflict``: a save just found another writer's snapshot; merge it first."""
        session = tracked.session
        with self.metrics.save_seconds.time():
            for attempt in range(self.settings.save_attempts):
                if not after_conflict or attempt:
                    snapshot = session.snapshot()
                    try:
                        replaced = self.store.save_if(snapshot, tracked.stored_digest)
                    except (CorruptSnapshot, UntrustedSnapshot) as exc:
                        # the stored snapshot was edited behind our back: keep it, halt
                        self._halt(tracked, exc)
                        return
                    if replaced:
                        tracked.saved(snapshot)
                        self.metrics.saved(trigger, len(snapshot.to_bytes()))
                        return
                    self.metrics.save_conflicts.inc()
                try:
                    stored = self._reload(tracked)
                except (CorruptSnapshot, UntrustedSnapshot) as exc:
                    self._halt(tracked, exc)
                    return
                if stored is not None and stored.digest == session.snapshot().digest:
                    tracked.saved(stored)  # the other writer's snapshot already has it all
                    return
        raise SessionStoreError(
            f"session {session.tenant_id}/{session.session_id}: still conflicting after "
            f"{self.settings.save_attempts} save attempts"
        )

    def _reload(self, tracked: Tracked) -> AgentSessionSnapshot | None:
        """Merge what another writer stored into ``tracked`` (a conflict was detected)."""
        session = tracked.session
        stored = self.store.load(session.tenant_id, session.session_id)
        tracked.stored_digest = stored.digest if stored is not None else None
        if stored is not None:
            AgentSession.from_snapshot(stored)  # verified before use, as on first load
            added = session.merge(stored)
            log.info(
                "sessions: %s/%s was saved by another writer; merged %d event(s)",
                session.tenant_id,
                session.session_id,
                added,
            )
        return stored

    # --- durability and commit points ---------------------------------------------------------
    def flush(self) -> None:
        """Save what is due and publish the pointers; :class:`StoreUnavailable` if the store or
        the sessions topic cannot take them now (the runtime retries; nothing is lost). Either
        way the checkpoint then holds the first unsaved event of each partition."""
        try:
            self._store_error = None
            self._due.clear()  # saved below with every other session due
            self._save_all(t for t in self._sessions.values() if t.due)
            if self._store_error is not None:
                raise StoreUnavailable(
                    f"session store {self.store.describe()}", str(self._store_error)
                )
            self._publish(self._sessions.values())
        finally:
            self.context.checkpoint.set_holds(self._held())

    def _publish(self, sessions: Iterable[Tracked]) -> None:
        sent = False
        for tracked in sessions:
            snapshot = tracked.unpublished
            if snapshot is None:
                continue
            if self.pointers is None:  # pointers are off: nothing to send
                tracked.unpublished = None
                continue
            message = self.pointers.send(snapshot)
            kind = "reference" if message.by_reference else "inline"
            self.metrics.pointers.labels(self.name, kind).inc()
            tracked.unpublished = None
            sent = True
        if self.pointers is not None and (sent or self.pointers.pending):
            self.pointers.flush()

    def _held(self) -> dict[Partition, int]:
        """Per partition, the first event of any session not saved yet."""
        held: dict[Partition, int] = {}
        for tracked in self._sessions.values():
            for partition, offset in tracked.first_unsaved.items():
                if offset < held.get(partition, offset + 1):
                    held[partition] = offset
        return held

    def tick(self, now_ms: int) -> None:
        """Save the sessions the batch made due, together; save sessions quiet with unsaved
        events; forget saved ones quiet for long; apply the retention policy when due
        (snapshots, content store, checkpoints)."""
        if self._due:
            due, self._due = self._due, {}
            self._save_all(due.values())
        for timer in self.retention:
            timer.tick(now_ms)
        if now_ms < self._next_scan_ms:
            return
        self._next_scan_ms = now_ms + SCAN_INTERVAL_MS
        self._save_all((t for t in self._sessions.values() if self.policy.idle(t, now_ms)), "idle")
        stale = [
            key
            for key, t in self._sessions.items()
            if not t.dirty and t.unpublished is None and now_ms - t.touched_ms >= self._evict_ms
        ]
        for key in stale:
            del self._sessions[key]
        self._update_gauges()

    def _prune(self, cutoff_s: float) -> int:
        """Snapshots not updated since ``cutoff_s``, their pointers first, then the large
        snapshots' blobs uploaded before it; those of sessions held in memory are spared
        (their next save expects the stored snapshot, their pointer names the blob)."""
        forget = self.pointers.forget if self.pointers is not None else None
        deleted = prune_sessions(
            self.store, cutoff_s, forget=forget, spare=self._sessions.__contains__
        )
        if self.pointers is not None and self.pointers.blobs is not None:
            deleted += prune_session_blobs(
                self.pointers.blobs, cutoff_s, spare=list(self._sessions)
            )
        return deleted

    # --- membership and shutdown --------------------------------------------------------------
    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        """Save the sessions with events from these partitions, then forget them (the
        next owner loads them from the store)."""
        gone = set(partitions)
        leaving = {k: t for k, t in self._sessions.items() if t.partitions() & gone}
        for key in leaving:
            self._due.pop(key, None)  # saved now, as revoked
        self._save_all(leaving.values(), "revoke")
        try:
            self._publish(leaving.values())
        except StoreUnavailable as exc:  # not committed: the next owner re-reads them
            log.warning("sessions: pointers of revoked sessions not published: %s", exc)
        for key in leaving:
            del self._sessions[key]
        self._update_gauges()

    def close(self) -> None:
        try:
            self._save_all(self._sessions.values(), "shutdown")
            self._publish(self._sessions.values())
        except StoreUnavailable as exc:  # not committed: the next start re-reads them
            log.warning("sessions: stopping with output not durable: %s", exc)
        finally:
            if self.api is not None:
                self.api.stop()
                self.api.resolver.close()
            if self.pointers is not None:
                self.pointers.close()
            self.store.close()
