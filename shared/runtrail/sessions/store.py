"""``AgentSessionStore``: where session snapshots survive restarts, chosen by URL.

One adapter module per back end, the same contract behind each, named in the table of
:mod:`runtrail.persistence.kinds` (open one with ``open_store(SESSION_SNAPSHOTS, url)``):

* ``file:///dir`` — one JSON file per session (:mod:`.store_file`), the lightweight default;
* ``postgresql://…`` — one row per session (:mod:`.store_postgres`), for shared production use.

Contract:

* :meth:`~AgentSessionStore.save` is atomic (a reader sees the old snapshot or the new one,
  never a mix) and *newest wins*: it refuses to replace a snapshot holding more events
  (a higher :attr:`~AgentSessionSnapshot.revision`) and says so by returning False;
* :meth:`~AgentSessionStore.save_if` is compare-and-set on the stored digest, for writers
  that merge what another writer stored before replacing it; it first verifies the stored
  *content* against its digest and raises :class:`~runtrail.sessions.errors.CorruptSnapshot`
  (writing nothing, so the edited snapshot stays as evidence) when they disagree;
* :meth:`~AgentSessionStore.load` verifies the digest and refuses a corrupted snapshot with
  :class:`~runtrail.sessions.errors.CorruptSnapshot` naming the file or row;
* everything is scoped by tenant: a session ID alone never reaches another tenant's data;
* :meth:`~AgentSessionStore.sessions_holding` finds the sessions that hold a run or a key's
  references, so an erasure needs no list of sessions from its caller.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from runtrail.sessions.base import ClosableStore
from runtrail.sessions.errors import CorruptSnapshot, UntrustedSnapshot
from runtrail.sessions.snapshot import AgentSessionSnapshot


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One stored session, as listed (no content: listing must stay cheap)."""

    tenant_id: str
    session_id: str
    updated_at: str  # ISO 8601, UTC

    def as_json(self) -> dict[str, str]:
        return {
            "tenantId": self.tenant_id,
            "sessionId": self.session_id,
            "updatedAt": self.updated_at,
        }


Summaries = list[SessionSummary]
#: Session IDs, sorted (the class's own ``list`` method hides the builtin in its body).
SessionIds = list[str]

#: What :meth:`AgentSessionStore.save_all_if` answers for one snapshot: what ``save_if``
#: returned, or the exception it raised.
SaveOutcome = bool | Exception


def refuses_one_snapshot(exc: BaseException) -> bool:
    """Whether a save's error is a verdict on its stored snapshot (corrupt, untrusted), not on
    the store: the other saves of a batch go on."""
    return isinstance(exc, (CorruptSnapshot, UntrustedSnapshot))


class AgentSessionStore(ClosableStore):
    """Saves, loads, lists and deletes session snapshots; see the module docstring."""

    @abstractmethod
    def save(self, snapshot: AgentSessionSnapshot) -> bool:
        """Store ``snapshot`` atomically unless a newer one (more events) is stored; True if
        written, False if the stored one was kept."""

    @abstractmethod
    def save_if(self, snapshot: AgentSessionSnapshot, expected_digest: str | None) -> bool:
        """Store ``snapshot`` only if the stored one has ``expected_digest`` (None: only if
        there is none); False if another writer got there first. CorruptSnapshot, and nothing
        written, if the stored content does not match its digest."""

    def save_all_if(
        self, items: Iterable[tuple[AgentSessionSnapshot, str | None]]
    ) -> list[SaveOutcome]:
        """:meth:`save_if` for each ``(snapshot, expected_digest)``; the outcomes in order.

        A snapshot refused as corrupt or untrusted does not stop the others; any other error
        stops taking items (a store that cannot take one write will not take the next), so
        the list may be shorter than ``items``: the items without an outcome were not tried.
        ``items`` may be lazy, and a store that overlaps the writes (the file store: their
        fsyncs) writes one snapshot while the caller builds the next. The default saves them
        one after the other."""
        outcomes: list[SaveOutcome] = []
        for snapshot, expected in items:
            try:
                outcomes.append(self.save_if(snapshot, expected))
            except Exception as exc:
                outcomes.append(exc)
                if not refuses_one_snapshot(exc):
                    break
        return outcomes

    @abstractmethod
    def load(self, tenant_id: str, session_id: str) -> AgentSessionSnapshot | None:
        """The verified snapshot, or None if there is none; CorruptSnapshot if it is altered."""

    @abstractmethod
    def list(self, tenant_id: str | None = None) -> Summaries:
        """The stored sessions of one tenant (all tenants when None), by tenant then ID."""

    @abstractmethod
    def delete(self, tenant_id: str, session_id: str) -> bool:
        """Remove a session's snapshot; False if there was none."""

    @abstractmethod
    def sessions_holding(
        self, tenant_id: str, runs: Collection[str], text: str | None = None
    ) -> SessionIds:
        """The IDs (sorted) of the tenant's sessions whose snapshot applied an event of one of
        ``runs`` (its ``lastAppliedSequence`` names the run) or whose stored form contains
        ``text`` (an erasure's destroyed key, as its references spell it): the sessions an
        erasure must delete without being told their names. It reads every snapshot of the
        tenant (unverified: a snapshot is found even if it was altered), so it is for an
        erasure, not a hot path."""

    @contextlib.contextmanager
    def durable_on_exit(self) -> Iterator[None]:
        """Saves inside may leave the last step of their durability (the file store's folder
        fsync) to the exit, once for all of them: a save inside is durable when this exits
        without an error, not when it returns. The caller commits and publishes nothing
        in between. The default: every save is durable when it returns."""
        yield
