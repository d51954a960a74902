"""Retention applied by the services themselves, with ``RUNTRAIL_RETENTION_POLICY``, on a real
broker: capture drops its old days, the sessions service its old snapshots (their pointers
tombstoned on the sessions topic) and their blobs, the content store's old objects and the
LangGraph checkpoints beyond the latest N of every thread of every tenant, the resume-cache
service its old entries (tombstoned on the cache topic), through the same functions as
``runtrail prune``, each pass by age written to the prune log the explorer reads; what is
younger stays."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from runtrail.config import Settings
from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, SESSION_SNAPSHOTS, open_store
from runtrail.persistence.kinds import PRUNE_LOG
from runtrail.privacy.reference import ERASED
from runtrail.privacy.vault import ContentVault
from runtrail.publisher import Publisher
from tests.sessions_support import checkpoint_steps, put_checkpoints, read_pointers
from tests.support import (
    ServiceProcess,
    committed_offsets,
    create_topic,
    end_offsets,
    unique_topic,
    wait_for,
)

PARTITIONS = 2
OLD_MS = int((time.time() - 40 * 86_400) * 1000)
POLICY: dict[str, Any] = {
    **{name: {"olderThanDays": 30} for name in ("capture", "sessions", "resumeCache", "content")},
    "checkpoints": {"keepLatest": 2},
}


def run_events(run: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("run.accepted", {"goalRef": "goal-1", "policyVersion": "p1"}),
        ("TOOL_CALL", {"callId": "c1", "toolName": "lookup", "arguments": {"q": run}}),
        ("TOOL_RESULT", {"callId": "c1", "toolName": "lookup", "output": {"rows": [run]}}),
        ("STEP_END", {}),
        ("run.succeeded", {}),
    ]


def live(bootstrap: str, topic: str) -> set[bytes]:
    return {k for k, v in read_pointers(bootstrap, topic).items() if v is not None}


def cached_runs(bootstrap: str, topic: str) -> set[str]:
    """The runs with a live entry on the cache topic."""
    keys = [json.loads(k) for k in live(bootstrap, topic)]
    return {k[2] for k in keys if k[0] == "entry"}


@pytest.mark.kafka
def test_services_prune_what_their_policy_no_longer_keeps(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("ret-ev"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    cache_topic = unique_topic("ret-rc")  # created compacted by the resume-cache service
    sessions_topic = create_topic(
        kafka_bootstrap, unique_topic("ret-se"), PARTITIONS, **{"cleanup.policy": "compact"}
    )
    state = tmp_path / "state"
    old_day = state / "capture" / "t1" / "2020-01-01"
    old_day.mkdir(parents=True)
    (old_day / "records.jsonl").write_text("{}\n")
    content_url, keys_url = (state / "content").as_uri(), (state / "keys").as_uri()
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, content_url), open_store(DATA_KEYS, keys_url)
    )
    old_ref = vault.put("t1", "run-old", "old content")
    new_ref = vault.put("t1", "run-new", "new content")
    vault.content.sync()
    old_segment = state / "content" / "t1" / old_ref.key_id / "objects.seg"
    os.utime(old_segment, (OLD_MS / 1000, OLD_MS / 1000))
    checkpoints_url = (state / "sessions").as_uri()  # the session store: the default
    put_checkpoints(checkpoints_url, "t1", "thread-a", 4)
    put_checkpoints(checkpoints_url, "t2", "thread-b", 3)
    env = {
        "RUNTRAIL_STATE_DIR": str(state),
        "RUNTRAIL_TENANT": "t1",
        "RUNTRAIL_RESUME_CACHE_TOPIC": cache_topic,
        "RUNTRAIL_SESSIONS_TOPIC": sessions_topic,
        "RUNTRAIL_RETENTION_POLICY": json.dumps(POLICY),
        "RUNTRAIL_RETENTION_INTERVAL_S": "1",
        "RUNTRAIL_CONTENT_STORE_URL": content_url,
        "RUNTRAIL_KEY_STORE_URL": keys_url,
    }
    options = {
        "capture": {"idle_flush_s": "0.5"},
        "resume-cache": {"http_port": "0"},
        # spared while in memory; every snapshot uploaded as a blob
        "sessions": {"http_port": "0", "evict_after_s": "1", "inline_limit_bytes": "0"},
    }
    services = [
        ServiceProcess(
            name,
            kafka_bootstrap,
            events,
            group=f"{name}-{events}",
            options=opts,
            env=env,
            log_path=tmp_path / f"{name}.log",
        )
        for name, opts in options.items()
    ]

    def caught_up() -> bool:
        try:
            ends = end_offsets(kafka_bootstrap, events, PARTITIONS)
            committed = [
                committed_offsets(kafka_bootstrap, f"{name}-{events}", events, PARTITIONS)
                for name in options
            ]
        except KafkaException:
            return False
        return all(c[p] >= end for c in committed for p, end in ends.items() if end > 0)

    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=events,
        state_dir=state,
        spool_dir=state / "spool",
        tenant="t1",
    )
    sessions = open_store(SESSION_SNAPSHOTS, (state / "sessions").as_uri())
    try:
        with Publisher(settings) as publisher:
            for run in ("run-1", "run-2"):
                for kind, data in run_events(run):
                    assert publisher.publish(kind, run, data, session_id=f"s-{run}")
            assert publisher.flush(60) == 0
        wait_for(caught_up, 120, 0.5, what="the services to consume the runs")
        wait_for(
            lambda: (
                cached_runs(kafka_bootstrap, cache_topic) == {"run-1", "run-2"}
                and len(live(kafka_bootstrap, sessions_topic)) == 2
            ),
            60,
            0.5,
            what="the entries and pointers on the topics",
        )
        assert not old_day.exists()  # capture pruned its old day at start
        # the sessions service pruned the content store and the checkpoints at start
        assert vault.resolve("t1", old_ref) == ERASED
        assert vault.resolve("t1", new_ref) == "new content"
        assert checkpoint_steps(checkpoints_url, "t1", "thread-a") == [3, 2]
        assert checkpoint_steps(checkpoints_url, "t2", "thread-b") == [2, 1]
        blobs = state / "session-blobs" / "t1"
        assert {p.name for p in blobs.iterdir()} == {"s-run-1", "s-run-2"}

        # age run-1's entry and session past the policy
        db = sqlite3.connect(state / "resume-cache.db", timeout=30)
        with db:
            db.execute("UPDATE rc_entries SET written_ms = ? WHERE run_id = 'run-1'", (OLD_MS,))
        db.close()
        [snapshot] = [p for p in (state / "sessions").rglob("s-run-1*") if p.is_file()]
        for aged in (snapshot, *(blobs / "s-run-1").iterdir()):  # its blob was uploaded then
            os.utime(aged, (OLD_MS / 1000, OLD_MS / 1000))

        wait_for(
            lambda: (
                cached_runs(kafka_bootstrap, cache_topic) == {"run-2"}
                and live(kafka_bootstrap, sessions_topic) == {b"t1/s-run-2"}
            ),
            60,
            0.5,
            what="the services to prune run-1's entry and session",
        )
        db = sqlite3.connect(state / "resume-cache.db", timeout=30)
        runs = {r for (r,) in db.execute("SELECT run_id FROM rc_entries")}
        db.close()
        assert runs == {"run-2"}
        assert [s.session_id for s in sessions.list("t1")] == ["s-run-2"]
        assert not list((blobs / "s-run-1").iterdir())
        assert list((blobs / "s-run-2").iterdir())
        log = open_store(PRUNE_LOG, f"sqlite:///{state / 'prunes.db'}")
        try:  # each pass that deleted something is in the log the explorer reads
            stores = {f.store for f in log.facts("t1")}
            assert stores == {"capture", "sessions", "resumeCache", "content"}
        finally:
            log.close()
    finally:
        sessions.close()
        vault.close()
        for service in services:
            service.terminate()
            service.close()
