"""The LangGraph checkpoint threads of an erasure: found without the caller naming them, then
deleted.

Why a step of its own: a graph's state — its messages, tool results, whatever its nodes
return — is in its checkpoints as the graph holds it, in plaintext. The publisher puts an
event's fields by reference; it never sees the checkpoints. So a thread a runtrail run wrote
to is a derived copy of the run's content, and so is a thread whose state holds references a
data subject's key sealed. The checkpoint store tells which
(:meth:`~runtrail.sessions.checkpoints.CheckpointBackend.threads_holding`): by the runtrail
run stamped in the checkpoints' metadata (:mod:`runtrail.adapters.langgraph_marks`), and by
the destroyed key's references. A thread is a copy as a whole, like a session: its later
checkpoints carry the state the erased run left, so every thread found, and every thread the
caller names, is deleted whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtrail.privacy.erased_holders import ErasedHolders

if TYPE_CHECKING:
    from runtrail.sessions.checkpoints import CheckpointBackend


@dataclass(slots=True)
class ErasedThreads(ErasedHolders):
    """The LangGraph checkpoint threads of one erasure, gathered before they are deleted."""

    def _holding(self, marker: str | None) -> Iterable[str]:
        with self._store() as backend:
            return list(backend.threads_holding(self.tenant, self.runs, marker))

    def delete(self, key_id: str | None) -> int:
        """Delete every thread found, all its checkpoints, channel values and writes; how
        many."""
        threads = sorted(self.search(key_id))
        with self._store() as backend:
            for thread in threads:
                backend.delete_thread(self.tenant, thread)
        return len(threads)

    def _store(self) -> CheckpointBackend:
        from runtrail.persistence import open_store
        from runtrail.persistence.kinds import LANGGRAPH_CHECKPOINTS

        return open_store(LANGGRAPH_CHECKPOINTS, self.store_url)
