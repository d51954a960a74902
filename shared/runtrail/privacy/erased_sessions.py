"""The session copies of an erasure: found without the caller naming them, then deleted.

Why a step of its own: a session that applied an erased run's events (or that holds a data
subject's references) keeps them in three places — its snapshot in the session store, its
large snapshots' blobs, and its pointer on the compacted sessions topic — and whoever asks
for an erasure cannot be expected to know which sessions those are. Each place that can tell
is asked:

* the session store: the snapshots of the tenant that applied the run or hold a reference
  sealed by the destroyed key (:meth:`~runtrail.sessions.store.AgentSessionStore.sessions_holding`);
* the sessions topic (unless there is no broker to reach): the latest pointers that name such
  a session, applied the run, or hold such a reference, inline or in the blob a pointer names
  (opened and searched: that pointer carries no snapshot;
  :func:`~runtrail.privacy.topic_tombstones.tombstone_sessions`).

Every session found, and those the caller names, then loses all three: its pointer is
tombstoned, its snapshot deleted from the store, its blobs' prefix deleted. The steps run in
that order, so the store's answer widens the tombstones and the topic's widens the deletions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtrail.privacy.erased_holders import ErasedHolders

if TYPE_CHECKING:
    from runtrail.config import Settings
    from runtrail.privacy.erasure import CopyEraser
    from runtrail.sessions.store import AgentSessionStore


@dataclass(slots=True)
class ErasedSessions(ErasedHolders):
    """The sessions of one erasure, gathered as the steps find them (the store's, then the
    topic's)."""

    #: the large snapshots' blob store's URL
    blobs_url: str = field(kw_only=True)

    def _holding(self, marker: str | None) -> Iterable[str]:
        with self._store() as store:
            return list(store.sessions_holding(self.tenant, self.runs, marker))

    def tombstone(self, settings: Settings, key_id: str | None) -> int:
        """Tombstone the pointers of the sessions found and of those the topic shows hold the
        erasure (those join the found); how many."""
        from runtrail.privacy.topic_tombstones import ErasedScope, tombstone_sessions
        from runtrail.sessions.blobs import SnapshotBlobStore

        scope = ErasedScope(self.tenant, self.runs, sorted(self.search(key_id)), key_id)
        tombstoned = tombstone_sessions(settings, scope, SnapshotBlobStore(self.blobs_url))
        self.found.update(tombstoned)
        return len(tombstoned)

    def delete_snapshots(self, key_id: str | None) -> int:
        """Delete the snapshots of every session found from the session store; how many."""
        sessions = sorted(self.search(key_id))
        with self._store() as store:
            return sum(store.delete(self.tenant, session) for session in sessions)

    def delete_blobs(self, _key_id: str | None) -> int:
        """Delete every large snapshot's blob of every session found, earlier saves
        included (a session's blobs share a prefix); how many."""
        if not self.found:
            return 0
        from runtrail.sessions.blobs import SnapshotBlobStore

        blobs = SnapshotBlobStore(self.blobs_url)
        return sum(blobs.delete_session(self.tenant, s) for s in sorted(self.found))

    def erasers(self, settings: Settings | None) -> dict[str, CopyEraser]:
        """The steps in their order, by report name; without ``settings`` (no broker to
        reach) the topic is left alone and the store alone finds the sessions."""
        steps: dict[str, CopyEraser] = {}
        if settings is not None:
            steps["sessionsTopic"] = lambda key_id: self.tombstone(settings, key_id)
        steps["sessions"] = self.delete_snapshots
        steps["sessionBlobs"] = self.delete_blobs
        return steps

    def _store(self) -> AgentSessionStore:
        from runtrail.persistence import open_store
        from runtrail.persistence.kinds import SESSION_SNAPSHOTS

        return open_store(SESSION_SNAPSHOTS, self.store_url)
