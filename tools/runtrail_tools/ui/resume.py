"""Can we resume it: what the resume cache holds for the run, its open intents (tool calls
whose outcome is not known), and the latest snapshot of each of the run's sessions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtrail.resume.entry import CacheEntry, Intent
from runtrail.sessions import SessionStoreError, UntrustedSnapshot
from runtrail_tools.ui.sources import Sources


@dataclass(frozen=True)
class SessionView:
    session_id: str
    #: None: the store has no snapshot of this session.
    digest: str | None
    events: int
    last_applied: dict[str, int]
    memory: Any
    problem: str | None = None


@dataclass(frozen=True)
class ResumeView:
    entries: list[CacheEntry]
    intents: list[Intent]
    last_sequence: int
    sessions: list[SessionView]


def session_view(sources: Sources, tenant: str, session_id: str) -> SessionView:
    try:
        snapshot = sources.sessions().load(tenant, session_id)
    except (SessionStoreError, UntrustedSnapshot) as exc:
        return SessionView(session_id, None, 0, {}, None, problem=str(exc))
    if snapshot is None:
        return SessionView(session_id, None, 0, {}, None)
    return SessionView(
        session_id=session_id,
        digest=snapshot.digest,
        events=len(snapshot.event_log),
        last_applied=dict(snapshot.last_applied_sequence),
        memory=snapshot.memory,
    )


def resume_view(sources: Sources, tenant: str, run_id: str, sessions: list[str]) -> ResumeView:
    cache = sources.cache()
    state = cache.run_state(tenant, run_id)
    entries = cache.entries(tenant, run_id)
    return ResumeView(
        entries=entries,
        intents=list(state.open_intents),
        last_sequence=state.last_sequence,
        sessions=[session_view(sources, tenant, s) for s in sessions],
    )
