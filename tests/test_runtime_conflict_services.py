"""Issue 11.7's figure for the stores test_runtime_conflict.py does not read: a second writer
reusing sequences 5-8 of a run, through capture, resume-cache and sessions (real child
processes, topics by ``runtrail topics ensure``).

Each of them dead-letters the four reused sequences as ``sequence-conflict`` naming both
eventIds, and each store holds exactly what the first writer's events make, none of the
second's: capture the records a pairer makes of the topic without the conflicts,
resume-cache the entries the builder makes of them, sessions a session at the first writer's thirteen events.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtrail.capture import NodePairer
from runtrail.events import EventCodec, validate_json_form
from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.runtime.deadletter import H_REASON, H_SERVICE
from runtrail.runtime.decoding import H_CONFLICT_EVENT, H_CONFLICT_FIRST
from runtrail.sessions.store_file import FileSessionStore
from tests.capture_support import prompt
from tests.support import (
    ServiceProcess,
    consume_all,
    end_offsets,
    form,
    produce_forms,
    wait_for,
)
from tests.test_capture_service_kafka import file_lines
from tests.test_runtime_poison_services import committed_at, ensure_topics

pytestmark = pytest.mark.kafka
PARTITIONS = 3
RUN = "run-two-writers"
SESSION = "s-two-writers"
SERVICES = ("capture", "resume-cache", "sessions")
EXPECTED_CONFLICTS = {f"b-{s}": f"a-{s}" for s in range(5, 9)}


def _node(writer: str, seq: int, note: str) -> dict[str, Any]:
    """Sequences 3k-1, 3k, 3k+1 are step k's MODEL_REQUEST, MODEL_RESPONSE and STEP_END."""
    step, kind = (seq - 2) // 3 + 1, (seq - 2) % 3
    data: dict[str, Any]
    if kind == 0:
        event_type, data = "MODEL_REQUEST", {"prompt": prompt(text=f"{note} {step}?")}
    elif kind == 1:
        event_type, data = "MODEL_RESPONSE", {"message": f"{note} {step}", "raw": None}
    else:
        event_type, data = "STEP_END", {"reason": "done"}
    return form(
        event_type,
        run_id=RUN,
        sequence=seq,
        data=data,
        eventId=f"{writer}-{seq}",
        sessionId=SESSION,
        step=step,
    )


def _writer_a(first: int, last: int) -> list[dict[str, Any]]:
    out = []
    for seq in range(first, last + 1):
        if seq == 1:
            data = {"goalRef": "goal://1", "policyVersion": "p-1"}
            out.append(
                form(
                    "run.accepted",
                    run_id=RUN,
                    sequence=1,
                    data=data,
                    eventId="a-1",
                    sessionId=SESSION,
                    step=None,
                )
            )
        else:
            out.append(_node("a", seq, "first"))
    return out


def _writer_b() -> list[dict[str, Any]]:
    return [_node("b", seq, "other") for seq in range(5, 9)]


def _conflicts(bootstrap: str, dlq: str, service: str) -> dict[str, str]:
    out = {}
    for msg in consume_all(bootstrap, dlq, expect=4 * len(SERVICES), timeout=60):
        headers = dict(msg.headers())
        if headers[H_SERVICE] != service.encode():
            continue
        assert headers[H_REASON] == b"sequence-conflict", headers
        out[headers[H_CONFLICT_EVENT].decode()] = headers[H_CONFLICT_FIRST].decode()
    return out


def _stopped_or_at(
    proc: ServiceProcess, bootstrap: str, group: str, topic: str, end: dict[int, int]
) -> bool:
    return not proc.alive() or committed_at(bootstrap, group, topic, end)


def _capture_expected(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    """The lines a pairer makes of the topic in partition order, the conflicts left out."""
    codec = EventCodec()
    pairer = NodePairer()
    lines = []
    messages = consume_all(bootstrap, topic, expect=expect)
    assert len(messages) == expect
    for msg in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        event = codec.decode(msg.value()).event
        if event.event_id.startswith("b-"):
            continue
        for record in pairer.feed(event, msg.partition(), msg.offset(), now_ms=0):
            lines.append(record.to_json_line())
    return sorted(lines)


def test_every_store_holds_the_first_writers_events_and_the_dlq_the_conflicts(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"conflict-stores-{uuid.uuid4().hex[:8]}"
    env = {
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_DLQ_TOPIC": f"{topic}.dlq",
        "RUNTRAIL_RESUME_CACHE_TOPIC": f"{topic}.cache",
        "RUNTRAIL_SESSIONS_TOPIC": f"{topic}.sessions",
        "RUNTRAIL_OTLP_RAW_TOPIC": f"{topic}.otlp-raw",
        "RUNTRAIL_AUDIT_TOPIC": f"{topic}.audit",
        "RUNTRAIL_PARTITIONS": str(PARTITIONS),
    }
    ensure_topics(kafka_bootstrap, env, partitions=PARTITIONS)
    first = [*_writer_a(1, 10), *_writer_a(11, 13)]
    produce_forms(kafka_bootstrap, topic, [*_writer_a(1, 10), *_writer_b(), *_writer_a(11, 13)])
    end = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    options = {
        "capture": {"sink_url": (tmp_path / "capture").as_uri(), "idle_flush_s": "86400"},
        "resume-cache": {"http_port": "0", "tokens": '{"tok": "t1"}'},
        "sessions": {"http_enabled": "false", "idle_save_s": "1"},
    }
    procs = {
        name: ServiceProcess(
            name,
            kafka_bootstrap,
            topic,
            group=f"{name}-{topic}",
            options=options[name],
            env={**env, "RUNTRAIL_STATE_DIR": str(tmp_path / name)},
            log_path=tmp_path / f"{name}.log",
        )
        for name in SERVICES
    }
    try:
        for name, proc in procs.items():
            wait_for(
                functools.partial(
                    _stopped_or_at, proc, kafka_bootstrap, f"{name}-{topic}", topic, end
                ),
                90,
                what=f"{name} committed the end",
            )
            assert proc.alive(), (tmp_path / f"{name}.log").read_text()[-3000:]
        for name in SERVICES:
            assert _conflicts(kafka_bootstrap, f"{topic}.dlq", name) == EXPECTED_CONFLICTS, name
        for name, proc in procs.items():
            assert proc.terminate() == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    finally:
        for proc in procs.values():
            proc.close()

    # capture: the records of the first writer's nodes, nothing of the second's
    lines = file_lines(tmp_path / "capture")
    assert sorted(lines) == _capture_expected(kafka_bootstrap, topic, sum(end.values()))
    assert len(lines) == 4 and not any(b"other" in line for line in lines)

    # resume-cache: the entries the builder makes of the first writer's events
    builder, batch = EntryBuilder(), WriteBatch()
    for f in first:
        builder.feed(validate_json_form(f), 0, batch)
    expected = {(e.tenant_id, e.run_id, e.kind.value, e.key) for e in batch.entries.values()}
    store = open_store(
        RESUME_ENTRIES, f"sqlite://{tmp_path / 'resume-cache' / 'resume-cache.db'}", readers=1
    )
    try:
        entries = list(store.entries())
    finally:
        store.close()
    assert {(e.tenant_id, e.run_id, e.kind.value, e.key) for e in entries} == expected
    assert expected and not any(b"other" in orjson.dumps(e, default=repr) for e in entries)

    # sessions: the session holds the thirteen events of the first writer
    snapshot = FileSessionStore(tmp_path / "sessions" / "sessions").load("t1", SESSION)
    assert snapshot is not None and snapshot.revision == len(first)
