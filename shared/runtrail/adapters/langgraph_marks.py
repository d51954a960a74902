"""Which runtrail run wrote a LangGraph thread's checkpoints, kept in the checkpoints' metadata.

A resume in another process (a web request answering a question hours later) has only the
thread: the handler that recorded the wait is gone. So when a root run ends, the handler stamps
the thread's newest checkpoint with the run it belongs to — the checkpoint LangGraph resumes
from, or forks after. The stamp is a few keys of the checkpoint's metadata (``runtrail_*``,
visible in ``graph.get_state(config).metadata``), written back through the checkpointer's own
``put`` under the same checkpoint ID with no new channel values, as LangGraph itself re-puts a
checkpoint when a graph exits. Any ``BaseCheckpointSaver`` keeps it (``RuntrailCheckpointSaver``,
``InMemorySaver`` — within its process — or a database saver).

* A **wait** adds the runtrail run ID, the sequence its next event takes, the input request and
  the run's session and turn: the resume continues that run at that sequence.
* Every stamp says where the run began (``runtrail_started_after``: the checkpoint it started
  from, or none), so the checkpoints between that one and the stamped one are the run's: a
  time-travel replay or fork from any of them names its source run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

RUN = "runtrail_run_id"
STARTED_AFTER = "runtrail_started_after"
NEXT_SEQUENCE = "runtrail_next_sequence"
REQUEST = "runtrail_request_id"
SESSION = "runtrail_session_id"
TURN = "runtrail_turn_id"
STEP = "runtrail_step"
SUSPENDED = "runtrail_suspended_calls"
#: Every key a stamp may set: a new stamp replaces them all (a run that went on is not waiting).
STAMP_KEYS = (RUN, STARTED_AFTER, NEXT_SEQUENCE, REQUEST, SESSION, TURN, STEP, SUSPENDED)

#: Checkpoints written by ``update_state`` (no run): their source run is their parent's.
_EDITS = ("update", "fork")
#: How far back an edit's source is looked for (edits stacked on edits).
_MAX_EDITS = 16


@dataclass(frozen=True)
class Wait:
    """A run stopped at ``interrupt()``: what its resume continues."""

    run_id: str
    next_sequence: int
    request_id: str
    session_id: str | None
    turn_id: str | None
    #: the graph step the run stopped in (it goes on in that step when resumed)
    step: int | None
    #: tool calls the interrupt stopped: their intent is recorded, they run again on resume
    suspended_calls: frozenset[str]
    #: the checkpoint the wait is stamped on (the resume starts after it)
    checkpoint_id: str


def _thread_config(thread: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def newest_checkpoint_id(checkpointer: Any, thread: str) -> str | None:
    """The ID of the thread's newest checkpoint (what a root run without a named checkpoint
    starts after), or None for a new thread."""
    found = checkpointer.get_tuple(_thread_config(thread))
    return None if found is None else str(found.config["configurable"]["checkpoint_id"])


def stamp(checkpointer: Any, thread: str, marks: Mapping[str, Any]) -> str | None:
    """Write ``marks`` into the metadata of the thread's newest checkpoint; its ID (None: the
    thread has no checkpoint)."""
    found = checkpointer.get_tuple(_thread_config(thread))
    if found is None:
        return None
    metadata = {k: v for k, v in found.metadata.items() if k not in STAMP_KEYS}
    metadata.update({k: v for k, v in marks.items() if v is not None})
    conf = found.config["configurable"]
    ns = str(conf.get("checkpoint_ns") or "")
    parent = found.parent_config or _thread_config(thread, ns)
    checkpointer.put(parent, found.checkpoint, metadata, {})
    return str(conf["checkpoint_id"])


def waiting_run(checkpointer: Any, thread: str) -> Wait | None:
    """The run the thread's newest checkpoint says is waiting for input, if any."""
    found = checkpointer.get_tuple(_thread_config(thread))
    if found is None:
        return None
    meta = found.metadata
    run, sequence, request = meta.get(RUN), meta.get(NEXT_SEQUENCE), meta.get(REQUEST)
    if run is None or request is None or not isinstance(sequence, int) or sequence < 1:
        return None
    session, turn, step = meta.get(SESSION), meta.get(TURN), meta.get(STEP)
    return Wait(
        str(run),
        sequence,
        str(request),
        None if session is None else str(session),
        None if turn is None else str(turn),
        step if isinstance(step, int) else None,
        frozenset(str(c) for c in meta.get(SUSPENDED) or ()),
        str(found.config["configurable"]["checkpoint_id"]),
    )


def writer_of(checkpointer: Any, address: Mapping[str, Any]) -> str | None:
    """The runtrail run that wrote the checkpoint at ``address`` (LangGraph's
    ``thread_id``/``checkpoint_ns``/``checkpoint_id``), from the stamps of the thread; for a
    checkpoint ``update_state`` wrote, the run that wrote the state it edited. None when no
    stamp covers it (written without the handler, or by a run that never ended)."""
    thread, ns = str(address.get("thread_id")), str(address.get("checkpoint_ns") or "")
    parents: dict[str, str | None] = {}
    sources: dict[str, Any] = {}
    stamped: list[tuple[str, str, str | None]] = []
    for item in checkpointer.list(_thread_config(thread, ns)):
        ident = str(item.config["configurable"]["checkpoint_id"])
        parent = item.parent_config
        parents[ident] = None if parent is None else parent["configurable"].get("checkpoint_id")
        sources[ident] = item.metadata.get("source")
        run = item.metadata.get(RUN)
        if run is not None:
            began = item.metadata.get(STARTED_AFTER)
            stamped.append((ident, str(run), None if began is None else str(began)))
    written: dict[str, str] = {}
    for ident, run, began in sorted(stamped):  # newer runs claim what they wrote last
        current: str | None = ident
        while current is not None and current != began and current in parents:
            written[current] = run
            current = parents[current]
    wanted: str | None = str(address.get("checkpoint_id"))
    for _ in range(_MAX_EDITS):
        if wanted is None:
            return None
        if wanted in written:
            return written[wanted]
        if sources.get(wanted) not in _EDITS:
            return None
        wanted = parents.get(wanted)
    return None
