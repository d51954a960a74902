"""Erasure end to end, on a real broker with the audit and capture services as processes.

A run whose prompts, outputs, reasoning, raw responses and tool arguments and results all go by
reference is sealed by the audit service and captured; ``runtrail erase --run`` then destroys
its data key and content and records a ``run.content_erased`` event. Afterwards: the run's
audit chain still verifies end to end (erasure event included), a projection rebuilt from
offset zero succeeds and says the run was erased, capture shows the erased marker where the
content was (another run's content still resolves), and no store, topic or spool holds the
sentinel string the run carried. The resume-cache and sessions services run too (snapshots
uploaded as blobs): after the erasure, the latest record of every key of their compacted topics
holds no entry, intent or session of the erased run (tombstones), and the erased run's session
has no snapshot in the session store and no blob left (found, not named), while the other
run's are still there. A control string published inline is
found by the same scan, so the scan can fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from runtrail.config import Settings
from runtrail.events.domain_events import ContentErased
from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail.projection.errors import InvalidTransition
from runtrail.projection.projector import apply_event
from runtrail.publisher import Publisher
from runtrail_services.sessions.settings import default_store_url
from tests.projection_support import full_run
from tests.publisher_support import read_all
from tests.sessions_support import read_pointers
from tests.support import (
    ServiceProcess,
    committed_offsets,
    create_topic,
    end_offsets,
    runtrail_cli,
    unique_topic,
    wait_for,
)

SENTINEL = "SENTINEL-erase-me-5b7e"
KEPT = "KEPT-other-run-91c2"
CONTROL = "CONTROL-inline-3d0f"
PARTITIONS = 2


def run_events(run: str, secret: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("run.accepted", {"goalRef": "goal-1", "policyVersion": "p1"}),
        ("MODEL_REQUEST", {"prompt": {"model": "m", "messages": [{"content": secret}]}}),
        ("MODEL_REASONING", {"text": f"reasoning on {secret}"}),
        (
            "MODEL_RESPONSE",
            {"message": secret, "raw": {"usage": {"prompt_tokens": 3}, "x": secret}},
        ),
        ("STEP_END", {"reason": CONTROL}),
        ("TOOL_CALL", {"callId": "c1", "toolName": "lookup", "arguments": {"q": secret}}),
        ("TOOL_RESULT", {"callId": "c1", "toolName": "lookup", "output": {"rows": [secret]}}),
        ("run.succeeded", {}),
    ]


def live(bootstrap: str, topic: str) -> dict[bytes, bytes]:
    """The keys of a compacted topic whose latest record is not a tombstone."""
    return {k: v for k, v in read_pointers(bootstrap, topic).items() if v is not None}


def cache_records(bootstrap: str, topic: str) -> list[list[Any]]:
    """The keys of the live entries and intents on the cache topic."""
    keys = [json.loads(k) for k in live(bootstrap, topic)]
    return [k for k in keys if k[0] in ("entry", "intent")]


def scan(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` holding ``needle``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.mark.kafka
def test_an_erased_run_verifies_rebuilds_reads_erased_and_leaves_no_trace(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("erase-ev"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    audit_topic = create_topic(kafka_bootstrap, unique_topic("erase-au"), partitions=PARTITIONS)
    cache_topic = unique_topic("erase-rc")  # created compacted by the resume-cache service
    sessions_topic = create_topic(
        kafka_bootstrap, unique_topic("erase-se"), PARTITIONS, **{"cleanup.policy": "compact"}
    )
    state = tmp_path / "state"
    env = {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": events,
        "RUNTRAIL_AUDIT_TOPIC": audit_topic,
        "RUNTRAIL_RESUME_CACHE_TOPIC": cache_topic,
        "RUNTRAIL_SESSIONS_TOPIC": sessions_topic,
        "RUNTRAIL_STATE_DIR": str(state),
        "RUNTRAIL_TENANT": "t1",
        "RUNTRAIL_CONTENT_STORE_URL": (state / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (state / "keys").as_uri(),
        "RUNTRAIL_PRIVACY_POLICY": json.dumps({"byReference": "all"}),
    }
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=events,
        state_dir=state,
        spool_dir=state / "spool",
        tenant="t1",
        content_store_url=env["RUNTRAIL_CONTENT_STORE_URL"],
        key_store_url=env["RUNTRAIL_KEY_STORE_URL"],
        privacy_policy={"byReference": "all"},
    )
    audit_db = f"sqlite:///{state / 'audit.db'}"
    assert runtrail_cli(env, "audit", "keygen").returncode == 0  # erasure events are signed
    services = [
        ServiceProcess(
            "audit",
            kafka_bootstrap,
            events,
            group=f"a-{events}",
            options={"store_url": audit_db},
            env=env,
            log_path=tmp_path / "audit.log",
        ),
        ServiceProcess(
            "capture",
            kafka_bootstrap,
            events,
            group=f"c-{events}",
            options={"sink_url": (state / "capture").as_uri(), "idle_flush_s": "0.5"},
            env=env,
            log_path=tmp_path / "capture.log",
        ),
        ServiceProcess(
            "resume-cache",
            kafka_bootstrap,
            events,
            group=f"r-{events}",
            options={"http_port": "0"},
            env=env,
            log_path=tmp_path / "resume-cache.log",
        ),
        ServiceProcess(
            "sessions",
            kafka_bootstrap,
            events,
            group=f"s-{events}",
            options={"http_port": "0", "inline_limit_bytes": "0"},  # snapshots as blobs
            env=env,
            log_path=tmp_path / "sessions.log",
        ),
    ]
    groups = [f"{name}-{events}" for name in "acrs"]

    def caught_up() -> bool:
        """Every service committed every partition at its end (a coordinator still loading
        on a fresh broker is asked again)."""
        try:
            ends = end_offsets(kafka_bootstrap, events, PARTITIONS)
            committed = [
                committed_offsets(kafka_bootstrap, group, events, PARTITIONS) for group in groups
            ]
        except KafkaException:
            return False
        return all(c[p] >= end for c in committed for p, end in ends.items() if end > 0)

    try:
        with Publisher(settings) as publisher:
            for run, secret in (("run-1", SENTINEL), ("run-2", KEPT)):
                for kind, data in run_events(run, secret):
                    published = publisher.publish(kind, run, data, session_id=f"s-{run}")
                    assert published, (kind, publisher.stats())
            assert publisher.flush(60) == 0
        wait_for(caught_up, 120, 0.5, what="the services to consume the runs")
        assert [r for r in cache_records(kafka_bootstrap, cache_topic) if r[2] == "run-1"]
        assert set(live(kafka_bootstrap, sessions_topic)) == {b"t1/s-run-1", b"t1/s-run-2"}
        blobs = state / "session-blobs" / "t1"
        assert {p.name for p in blobs.iterdir()} == {"s-run-1", "s-run-2"}
        sessions = open_store(SESSION_SNAPSHOTS, default_store_url(state))
        assert [s.session_id for s in sessions.list("t1")] == ["s-run-1", "s-run-2"]

        erased = runtrail_cli(
            env,
            "erase",
            "--tenant",
            "t1",
            "--run",
            "run-1",
            "--reason",
            "art. 17 request",
            "--requested-by",
            "dpo@example.com",
        )
        assert erased.returncode == 0, erased.stderr
        report = json.loads(erased.stdout.strip().splitlines()[-1])
        assert report["objectsDeleted"] == 6 and report["signed"] and report["eventId"]
        assert report["copiesDeleted"]["cacheTopic"] >= 2  # the model's and the tool's entries
        assert report["copiesDeleted"]["sessionsTopic"] == 1
        assert report["copiesDeleted"]["sessions"] == 1  # found, not named
        assert report["copiesDeleted"]["sessionBlobs"] >= 1
        assert [p.name for p in blobs.iterdir()] == ["s-run-2"]  # its pointer named them
        assert [s.session_id for s in sessions.list("t1")] == ["s-run-2"]
        again = runtrail_cli(env, "erase", "--tenant", "t1", "--run", "run-1", "--reason", "again")
        assert again.returncode == 1  # nothing left to erase
        wait_for(caught_up, 120, 0.5, what="the services to consume the erasure")
    finally:
        for service in services:
            service.terminate()
            service.close()

    # the compacted topics keep nothing of the erased run's content; the other run's stays
    cached = cache_records(kafka_bootstrap, cache_topic)
    assert not [r for r in cached if r[2] == "run-1"], cached
    assert {r[0] for r in cached if r[2] == "run-2"} >= {"entry"}
    assert set(live(kafka_bootstrap, sessions_topic)) == {b"t1/s-run-2"}

    # the chain still verifies, erasure event included
    verified = runtrail_cli(
        env, "audit", "verify", "--run", "run-1", "--tenant", "t1", "--store", audit_db
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    verdict = json.loads(verified.stdout.strip().splitlines()[-1])
    assert (verdict["valid"], verdict["length"]) == (True, 9)  # 8 events and the erasure

    # a projection rebuilt from offset zero succeeds and records the erasure
    rebuilt = f"sqlite:///{tmp_path / 'rebuilt.db'}"
    replay = runtrail_cli(
        env, "replay", "projection", "--into", rebuilt, "--from-beginning", "--quiet"
    )
    assert replay.returncode == 0, replay.stderr
    shown = runtrail_cli(
        env, "projection", "show", "--run", "run-1", "--tenant", "t1", "--store", rebuilt
    )
    assert shown.returncode == 0, shown.stderr
    projection = json.loads(shown.stdout)
    folded = projection["projection"]
    reason = folded.get("erasureReason", folded.get("erasure_reason"))
    assert (projection["status"], projection["halted"], reason) == (
        "succeeded",
        False,
        "art. 17 request",
    )

    # capture shows the erased marker; the other run's content still resolves
    query = runtrail_cli(
        env, "capture", "query", "--run", "run-1", "--sink", (state / "capture").as_uri()
    )
    assert query.returncode == 0, query.stderr
    records = [json.loads(line) for line in query.stdout.splitlines()]
    assert {r["nodeType"] for r in records} == {"MODEL", "TOOL"}
    assert all("[erased]" in json.dumps(r) for r in records) and SENTINEL not in query.stdout
    kept = runtrail_cli(
        env, "capture", "query", "--run", "run-2", "--sink", (state / "capture").as_uri()
    )
    assert KEPT in kept.stdout and "[erased]" not in kept.stdout

    # no trace of the sentinel anywhere; the inline control string is found by the same scan
    topics = {
        t: read_all(kafka_bootstrap, t, 1, timeout=10)
        for t in (events, f"{events}.dlq", audit_topic)
    }
    for name, messages in topics.items():
        assert not [m for m in messages if SENTINEL.encode() in (m.value() or b"")], name
    assert [m for m in topics[events] if CONTROL.encode() in m.value()]
    assert [m for m in topics[audit_topic] if CONTROL.encode() in m.value()]
    assert scan(state, SENTINEL.encode()) == []
    assert scan(state, CONTROL.encode())  # the audit store holds the inline field


def test_a_finished_run_still_records_its_erasure() -> None:
    run = full_run()
    state = None
    for event in run.events:
        state = apply_event(state, event)
    assert state is not None and state.status == "succeeded"
    erasure = {
        "scope": "run",
        "subjectDigest": "sha256:00",
        "reason": "asked",
        "requestedBy": "dpo",
        "objectsDeleted": 3,
    }
    after = apply_event(state, run.add("run.content_erased", erasure))
    assert isinstance(run.events[-1].data, ContentErased)
    assert (after.status, after.erasure_reason, after.erased_at) == (
        "succeeded",
        "asked",
        run.events[-1].occurred_at,
    )
    with pytest.raises(InvalidTransition, match="never resumes"):
        apply_event(after, run.add("STEP_END", {}))
