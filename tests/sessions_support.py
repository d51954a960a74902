"""Helpers for the session tests: deterministic session events and snapshots, store URLs.

Events are built from a seed, so two processes (a writer child and the test) build the very
same snapshot for a given revision and can compare digests.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from runtrail.events import CURRENT_VERSIONS, Event, validate_json_form
from runtrail.sessions import AgentSession, AgentSessionSnapshot

RUNS = ("run-a", "run-b")
STEP_EVENTS = ("MODEL_REQUEST", "MODEL_RESPONSE", "TOOL_CALL", "TOOL_RESULT", "STEP_END")


def _data(event_type: str, index: int, payload: int) -> dict[str, Any]:
    filler = ("x" * payload) if payload else ""
    if event_type == "MODEL_REQUEST":
        return {"prompt": {"model": "m", "messages": [f"q{index}{filler}"]}}
    if event_type == "MODEL_RESPONSE":
        return {"message": f"a{index}{filler}", "raw": None}
    if event_type == "TOOL_CALL":
        return {"callId": f"c{index}", "toolName": "search", "arguments": {"q": index}}
    if event_type == "TOOL_RESULT":
        return {"callId": f"c{index}", "toolName": "search", "output": {"hits": [index]}}
    if event_type == "session.snapshot":
        return {
            "lastAppliedSequence": index,
            "memory": {"turns": index, "notes": [f"n{i}" for i in range(index % 7)]},
            "compactResults": [{"step": index, "summary": f"s{index}"}],
        }
    return {"reason": "tool_use"}


def session_forms(
    count: int,
    *,
    start: int = 0,
    tenant: str = "t1",
    session: str = "s1",
    seed: str = "seed",
    payload: int = 0,
    snapshot_every: int = 7,
) -> list[dict[str, Any]]:
    """Events ``start`` to ``count - 1`` of one session over two runs (blocks of ten events
    each, alternating), deterministic for a seed."""
    forms = []
    for i in range(start, count):
        block = i // 10
        run = RUNS[block % len(RUNS)]
        sequence = (block // len(RUNS)) * 10 + i % 10 + 1
        event_type = (
            "session.snapshot"
            if snapshot_every and i % snapshot_every == snapshot_every - 1
            else STEP_EVENTS[i % len(STEP_EVENTS)]
        )
        forms.append(
            {
                "eventId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{seed}/{tenant}/{session}/{i}")),
                "runId": run,
                "tenantId": tenant,
                "sequence": str(sequence),
                "type": event_type,
                "schemaVersion": CURRENT_VERSIONS[event_type],
                "occurredAt": "2026-11-29T10:00:00.000Z",
                "recordedAt": f"2026-11-29T{10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
                "actor": {"kind": "agent", "id": "agent-1"},
                "causationEventId": None,
                "correlationId": run,
                "sessionId": session,
                "turnId": f"turn-{i // 5}",
                "step": i // 5 + 1,
                "data": _data(event_type, i, payload),
            }
        )
    return forms


def session_events(count: int, **kwargs: Any) -> list[Event]:
    return [validate_json_form(f) for f in session_forms(count, **kwargs)]


def built_session(count: int, **kwargs: Any) -> AgentSession:
    """The session holding the first ``count`` events of ``session_forms``."""
    events = session_events(count, **kwargs)
    session = AgentSession(events[0].tenant_id, str(events[0].session_id))
    for offset, event in enumerate(events):
        session.apply(event, source=("events", 0, offset))
    return session


def built_snapshot(count: int, **kwargs: Any) -> AgentSessionSnapshot:
    return built_session(count, **kwargs).snapshot()


REPO = Path(__file__).resolve().parents[1]


def writer_command(*args: str) -> list[str]:
    """The command line of :mod:`tests.sessions_writer` (run it with ``cwd=REPO``)."""
    return [sys.executable, "-m", "tests.sessions_writer", *args]


def run_writer(*args: str, timeout: float = 60.0) -> str:
    """Run the writer child to completion; its stdout (it must succeed)."""
    done = subprocess.run(
        writer_command(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def read_pointers(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """Latest value per key of a (compacted) topic, read from the start to its end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    latest: dict[bytes, bytes | None] = {}
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        while ends:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is not None:
                    continue
                latest[msg.key()] = msg.value()
                if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                    ends.pop(msg.partition(), None)
    finally:
        consumer.close()
    return latest


def put_checkpoints(url: str, tenant: str, thread: str, count: int) -> None:
    """``count`` LangGraph checkpoints of one thread (channel ``n`` = the step), through the
    runtrail saver on the store ``url`` names."""
    from langgraph.checkpoint.base import empty_checkpoint

    from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver

    with RuntrailCheckpointSaver.from_url(url, tenant_id=tenant) as saver:
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        version = None
        for step in range(count):
            state = empty_checkpoint()
            version = saver.get_next_version(version, None)
            state["channel_values"] = {"n": step}
            state["channel_versions"] = {"n": version}
            config = saver.put(config, state, {"source": "loop", "step": step}, {"n": version})


def checkpoint_steps(url: str, tenant: str, thread: str) -> list[int]:
    """The steps of a thread's checkpoints (see :func:`put_checkpoints`), latest first."""
    from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver

    with RuntrailCheckpointSaver.from_url(url, tenant_id=tenant) as saver:
        found = saver.list({"configurable": {"thread_id": thread}})
        return [t.checkpoint["channel_values"]["n"] for t in found]
