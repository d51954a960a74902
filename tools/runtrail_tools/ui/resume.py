"""Can we resume it: what the resume cache holds for the run, its open intents (tool calls
whose outcome is not known), and the latest snapshot of each of the run's sessions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtrail.capture.record import NodeIoRecord
from runtrail.resume.entry import CacheEntry, Intent
from runtrail.resume.keys import Kind
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


def _call_of(record: NodeIoRecord) -> tuple[str | None, str | None]:
    inputs = record.inputs if isinstance(record.inputs, dict) else {}
    return inputs.get("callId"), inputs.get("toolName")


def entry_node(entry: CacheEntry, records: list[NodeIoRecord]) -> NodeIoRecord | None:
    """The captured node an entry was built from: the same turn and step and kind, and for a
    tool the same call (its ID, else its tool name); the last such record (a retried model
    call's entry is its last attempt's answer)."""
    found = None
    for record in records:
        if (record.turn_id, record.step) != (entry.turn_id, entry.step):
            continue
        if entry.kind is Kind.MODEL and record.node_type == "MODEL":
            found = record
        elif entry.kind is not Kind.MODEL and record.node_type == "TOOL":
            call_id, tool = _call_of(record)
            if (entry.call_id and entry.call_id == call_id) or (
                not entry.call_id and entry.tool_name == tool
            ):
                found = record
    return found


def by_step(
    entries: list[CacheEntry], records: list[NodeIoRecord]
) -> list[tuple[CacheEntry, NodeIoRecord | None]]:
    """Entries in step order (a step's model answer before its tools), each with its node."""
    ordered = sorted(
        entries,
        key=lambda x: (x.step is None, x.step or 0, x.kind is not Kind.MODEL, x.call_id or ""),
    )
    return [(entry, entry_node(entry, records)) for entry in ordered]
