"""Issue 11.4's figure for the services test_runtime_poison.py does not run: the poison corpus
through capture, resume-cache and sessions, each a real ``runtrail run SERVICE`` child process
on topics made by ``runtrail topics ensure`` (so with the limits a 5 MB event needs).

Every item is processed or dead-lettered with an allowed reason, every canary after an item is
processed, the process keeps its PID and stops with status 0, and its store shows it: sessions
holds every event of each run's session that was not dead-lettered (and none that was);
resume-cache's store and capture's group are positioned at the end of the topic.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.sessions.store_file import FileSessionStore
from tests.poison_corpus import (
    Poison,
    corpus_records,
    dead_letters_by_offset,
    outcome_failures,
    produce_records,
)
from tests.support import ServiceProcess, committed_offsets, consume_all, wait_for

pytestmark = [pytest.mark.kafka]

#: runtime dead letters of the corpus: random bytes, garbage, depths 250/400/5000, inf, 1e999
CORPUS_DEAD = 7


def ensure_topics(bootstrap: str, env: dict[str, str], partitions: int = 1) -> None:
    """The README's ``runtrail topics ensure`` on a test's own topic names (from ``env``)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtrail_tools.cli.main",
            "topics",
            "ensure",
            "--bootstrap-servers",
            bootstrap,
            "--partitions",
            str(partitions),
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def run_corpus(
    bootstrap: str,
    tmp_path: Path,
    service: str,
    options: dict[str, str],
    at_end: Callable[[str, int], bool],
    sessions: bool = False,
) -> tuple[list[Poison], list[int], dict[int, str]]:
    """Produce the corpus, run ``service`` through it; the records, offsets and dead letters."""
    topic = f"corpus-{service}-{uuid.uuid4().hex[:8]}"
    env = {
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_DLQ_TOPIC": f"{topic}.dlq",
        "RUNTRAIL_RESUME_CACHE_TOPIC": f"{topic}.cache",
        "RUNTRAIL_SESSIONS_TOPIC": f"{topic}.sessions",
        "RUNTRAIL_OTLP_RAW_TOPIC": f"{topic}.otlp-raw",
        "RUNTRAIL_AUDIT_TOPIC": f"{topic}.audit",
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
    }
    ensure_topics(bootstrap, env)
    records = corpus_records(sessions=sessions)
    offsets = produce_records(bootstrap, topic, records)
    proc = ServiceProcess(
        service,
        bootstrap,
        topic,
        group=f"g-{topic}",
        options=options,
        env=env,
        log_path=tmp_path / "svc.log",
    )
    log = tmp_path / "svc.log"
    try:
        pid = proc.proc.pid
        wait_for(
            lambda: not proc.alive() or at_end(topic, offsets[-1] + 1),
            180,
            what=f"{service} through the corpus",
        )
        assert proc.alive(), log.read_text()[-3000:]
        dead = dead_letters_by_offset(
            consume_all(bootstrap, f"{topic}.dlq", expect=CORPUS_DEAD, timeout=60), service
        )
        assert proc.alive() and proc.proc.pid == pid
        assert proc.terminate() == 0, log.read_text()[-3000:]
    finally:
        proc.close()
    assert len(dead) >= CORPUS_DEAD, dead
    return records, offsets, dead


def committed_at(bootstrap: str, group: str, topic: str, end: dict[int, int]) -> bool:
    """``group`` has committed ``end`` on every partition that holds records (False while the
    group coordinator is still loading on a fresh broker)."""
    try:
        committed = committed_offsets(bootstrap, group, topic, len(end))
    except KafkaException:
        return False
    return all(committed[p] == o for p, o in end.items() if o)


def group_at(bootstrap: str) -> Callable[[str, int], bool]:
    """The service's group has committed the end of the (one-partition) topic."""
    return lambda topic, end: committed_at(bootstrap, f"g-{topic}", topic, {0: end})


def consumed(offsets: list[int], dead: dict[int, str]) -> set[int]:
    """Offsets the service committed past without dead-lettering them."""
    return {o for o in offsets if o not in dead}


def test_the_corpus_through_capture(kafka_bootstrap: str, tmp_path: Path) -> None:
    sink = tmp_path / "capture"
    records, offsets, dead = run_corpus(
        kafka_bootstrap,
        tmp_path,
        "capture",
        {"sink_url": sink.as_uri(), "idle_flush_s": "1"},
        group_at(kafka_bootstrap),
    )
    assert outcome_failures(records, offsets, consumed(offsets, dead), dead) == []


def test_the_corpus_through_resume_cache(kafka_bootstrap: str, tmp_path: Path) -> None:
    db = tmp_path / "state" / "resume-cache.db"

    def at_end(topic: str, end: int) -> bool:
        if not db.exists():
            return False
        store = open_store(RESUME_ENTRIES, f"sqlite://{db}", readers=1)
        try:
            return store.offsets(topic).get(0) == end
        finally:
            store.close()

    records, offsets, dead = run_corpus(
        kafka_bootstrap,
        tmp_path,
        "resume-cache",
        {"http_port": "0", "tokens": '{"tok": "t1"}'},
        at_end,
    )
    assert outcome_failures(records, offsets, consumed(offsets, dead), dead) == []


def test_the_corpus_through_sessions(kafka_bootstrap: str, tmp_path: Path) -> None:
    records, offsets, dead = run_corpus(
        kafka_bootstrap,
        tmp_path,
        "sessions",
        {"http_enabled": "false", "idle_save_s": "1"},
        group_at(kafka_bootstrap),
        sessions=True,
    )
    store = FileSessionStore(tmp_path / "state" / "sessions")
    applied: dict[str, int] = {}
    for record, offset in zip(records, offsets, strict=True):
        if record.run_id and offset not in dead:
            applied[record.run_id] = applied.get(record.run_id, 0) + 1
    processed = set()
    for record, offset in zip(records, offsets, strict=True):
        if not record.run_id:
            continue
        snapshot = store.load(record.tenant, f"s-{record.run_id}")
        revision = snapshot.revision if snapshot is not None else 0
        assert revision == applied[record.run_id], record.name  # the session holds them all
        if offset not in dead:
            processed.add(offset)
    assert outcome_failures(records, offsets, processed, dead) == []
