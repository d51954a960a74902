"""Issue 11.4: legal large content goes through end to end, as a user sets it up.

``runtrail topics ensure`` makes the topics, the Python ``Publisher`` with its default
settings publishes a node whose model response is 5 MB of incompressible text, and all six
services (real child processes) take it: capture writes the record with the whole answer,
resume-cache stores the node's entry, sessions the session, audit seals and verifies the
chain, the projector projects the run, noop commits it. Nothing is dead-lettered.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import orjson
import pytest

from runtrail.audit.store import verify_stored
from runtrail.config import Settings
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url as audit_sqlite_url
from runtrail.publisher import Publisher
from runtrail.sessions.store_file import FileSessionStore
from tests.capture_support import prompt
from tests.support import ServiceProcess, end_offsets, wait_for
from tests.test_capture_service_kafka import file_lines
from tests.test_runtime_poison_services import committed_at, ensure_topics

pytestmark = [pytest.mark.kafka]

SERVICES = ("capture", "resume-cache", "sessions", "audit", "projector", "noop")
PARTITIONS = 2
SIZE = 5 << 20


def options(service: str, state: Path) -> dict[str, str]:
    return {
        "capture": {"sink_url": (state / "capture").as_uri(), "idle_flush_s": "86400"},
        "resume-cache": {"http_port": "0", "tokens": '{"tok": "t1"}'},
        "sessions": {"http_enabled": "false", "idle_save_s": "1"},
        "audit": {"tree_head_interval_s": "5"},
        "projector": {},
        "noop": {"output": str(state.parent / "noop.out")},
    }[service]


def test_a_5mb_model_response_goes_through_every_service(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"large-{uuid.uuid4().hex[:8]}"
    env = {
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_DLQ_TOPIC": f"{topic}.dlq",
        "RUNTRAIL_RESUME_CACHE_TOPIC": f"{topic}.cache",
        "RUNTRAIL_SESSIONS_TOPIC": f"{topic}.sessions",
        "RUNTRAIL_OTLP_RAW_TOPIC": f"{topic}.otlp-raw",
        "RUNTRAIL_AUDIT_TOPIC": f"{topic}.audit",
    }
    ensure_topics(kafka_bootstrap, env, partitions=PARTITIONS)
    answer = base64.b64encode(os.urandom(SIZE * 3 // 4 + 3)).decode()[:SIZE]
    run, session = "run-large", "sess-large"
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        spool_dir=tmp_path / "spool",
        tenant="t1",
    )
    with Publisher(settings) as pub:
        ids = [
            pub.publish(
                "run.accepted",
                run,
                {"goalRef": "goal://large", "policyVersion": "p-1"},
                session_id=session,
            ),
            pub.publish("MODEL_REQUEST", run, {"prompt": prompt()}, session_id=session, step=1),
            pub.publish(
                "MODEL_RESPONSE", run, {"message": answer, "raw": None}, session_id=session, step=1
            ),
            pub.publish("STEP_END", run, {"reason": "done"}, session_id=session, step=1),
        ]
        assert all(ids), ids
        assert pub.flush(60) == 0
        assert pub.stats().sent == 4, pub.stats()
    end = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    assert sum(end.values()) == 4

    procs = {
        name: ServiceProcess(
            name,
            kafka_bootstrap,
            topic,
            group=f"g-{name}-{topic}",
            options=options(name, tmp_path / name),
            env={**env, "RUNTRAIL_STATE_DIR": str(tmp_path / name)},
            log_path=tmp_path / f"{name}.log",
        )
        for name in SERVICES
    }
    try:
        for name, proc in procs.items():
            group = f"g-{name}-{topic}"

            def done(proc: ServiceProcess = proc, group: str = group) -> bool:
                return not proc.alive() or committed_at(kafka_bootstrap, group, topic, end)

            wait_for(done, 120, 0.5, what=f"{name} committed the run")
            assert proc.alive(), (tmp_path / f"{name}.log").read_text()[-3000:]
        assert end_offsets(kafka_bootstrap, f"{topic}.dlq", PARTITIONS) == dict.fromkeys(
            range(PARTITIONS), 0
        ), "something was dead-lettered"
        for name, proc in procs.items():
            assert proc.terminate() == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    finally:
        for proc in procs.values():
            proc.close()

    lines = file_lines(tmp_path / "capture" / "capture")
    assert len(lines) == 1 and answer.encode() in lines[0]
    assert orjson.loads(lines[0])["runId"] == run

    cache = open_store(
        RESUME_ENTRIES, f"sqlite://{tmp_path / 'resume-cache' / 'resume-cache.db'}", readers=1
    )
    try:
        assert [e.run_id for e in cache.entries()] == [run]
    finally:
        cache.close()

    snapshot = FileSessionStore(tmp_path / "sessions" / "sessions").load("t1", session)
    assert snapshot is not None and snapshot.revision == 4

    links = open_store(AUDIT_LINKS, audit_sqlite_url(tmp_path / "audit" / "audit.db"))
    try:
        assert [str(link.event["eventId"]) for link in links.load_chain("t1", run)] == ids
        assert verify_stored(links, "t1", run).valid
    finally:
        links.close()

    projections = open_store(PROJECTIONS, f"sqlite:///{tmp_path / 'projector' / 'projection.db'}")
    try:
        stored = projections.get("t1", run)
        assert stored is not None and not stored.halted and stored.version == 4
    finally:
        projections.close()
