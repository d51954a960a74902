"""``runtrail cache export`` → ``cache import`` → ``cache export`` loses nothing, open intents
included, and an imported intent is where the service looks for open state (issue 12 item 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.resume.partitioning import partition_for
from tests.support import create_topic, unique_topic
from tests.test_resume_builder import PROMPT, events

pytestmark = [pytest.mark.kafka]

CLI = [sys.executable, "-m", "runtrail_tools.cli.main", "cache"]


def _cache(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _seed(url: str, topic: str) -> None:
    """Two tenants' entries and three open intents (calls whose outcome is unknown)."""
    store = open_store(RESUME_ENTRIES, url, readers=1)
    try:
        builder = EntryBuilder()
        for tenant, run in (("acme", "run-a"), ("globex", "run-b")):
            out = WriteBatch()
            specs = [
                ("MODEL_REQUEST", {"prompt": PROMPT}),
                ("MODEL_RESPONSE", {"message": "ok", "raw": {"id": 1}}),
                ("STEP_END", {"reason": "tool_use"}),
                ("TOOL_CALL", {"callId": "c0", "toolName": "read", "arguments": {"q": 1}}),
                ("TOOL_RESULT", {"callId": "c0", "toolName": "read", "output": "r"}),
                ("TOOL_CALL", {"callId": "c1", "toolName": "charge", "arguments": {"amount": 5}}),
            ]
            if tenant == "acme":
                specs.append(("TOOL_CALL", {"callId": "c2", "toolName": "mail", "arguments": {}}))
            for e in events(*specs, run=run, tenant=tenant):
                builder.feed(e, 0, out)
            store.apply(out, topic)
        assert len(store.intents()) == 3
    finally:
        store.close()


def test_export_import_export_is_byte_equal_with_open_intents(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("rt-cache"), partitions=5)
    source, target = sqlite_url(tmp_path / "a.db"), sqlite_url(tmp_path / "b.db")
    _seed(source, topic)
    conn = ["--bootstrap-servers", kafka_bootstrap, "--events-topic", topic]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    _cache("export", str(first), "--store-url", source, *conn)
    assert len(orjson.loads(first.read_bytes())["intents"]) == 3

    done = _cache("import", str(first), "--no-topic", "--store-url", target, *conn)
    assert "3 new of 3 open intents" in done.stderr
    _cache("export", str(second), "--store-url", target, *conn)
    assert second.read_bytes() == first.read_bytes()

    # Filed under the run's partition of the events topic (asked of the broker: 5), so the
    # service restores them on assignment and a later TOOL_RESULT closes them.
    imported = open_store(RESUME_ENTRIES, target, readers=1)
    try:
        partition = partition_for("run-a", 5)
        _, intents = imported.open_state(topic, [partition])
        assert sorted((i.call_id, p) for i, p in intents if i.run_id == "run-a") == [
            ("c1", partition),
            ("c2", partition),
        ]
        assert imported.run_state("acme", "run-a").open_intents != ()
    finally:
        imported.close()

    again = _cache("import", str(first), "--no-topic", "--store-url", target, *conn)
    assert "0 new of 3 open intents" in again.stderr  # first wins, nothing doubled


def test_import_of_intents_names_the_topic_it_cannot_find(tmp_path: Path) -> None:
    source = sqlite_url(tmp_path / "a.db")
    _seed(source, "runtrail.events")
    exported = tmp_path / "export.json"
    _cache("export", str(exported), "--store-url", source)
    done = subprocess.run(
        [
            *CLI,
            "import",
            str(exported),
            "--no-topic",
            "--store-url",
            sqlite_url(tmp_path / "b.db"),
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--events-topic",
            "no-such-topic",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "no-such-topic" in done.stderr and "--partitions" in done.stderr
    with_count = _cache(
        "import",
        str(exported),
        "--no-topic",
        "--partitions",
        "3",
        "--store-url",
        sqlite_url(tmp_path / "c.db"),
    )
    assert "3 new of 3 open intents" in with_count.stderr


def test_imported_intents_reach_the_cache_topic_too(kafka_bootstrap: str, tmp_path: Path) -> None:
    import os

    from runtrail.resume.records import parse_record
    from tests.support import consume_all

    topic = create_topic(kafka_bootstrap, unique_topic("rt-cache"), partitions=3)
    cache_topic = f"{topic}.cache"
    source = sqlite_url(tmp_path / "a.db")
    _seed(source, topic)
    exported = tmp_path / "export.json"
    _cache("export", str(exported), "--store-url", source)
    env = {**os.environ, "RUNTRAIL_RESUME_CACHE_TOPIC": cache_topic}
    done = subprocess.run(
        [
            *CLI, "import", str(exported), "--store-url", sqlite_url(tmp_path / "b.db"),
            "--bootstrap-servers", kafka_bootstrap, "--events-topic", topic,
        ],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [
        parse_record(m.key(), m.value())
        for m in consume_all(kafka_bootstrap, cache_topic, expect=7, timeout=30)
    ]
    kinds = sorted(r.type for r in records if r is not None)
    assert kinds == ["entry"] * 4 + ["intent"] * 3
    assert sorted(r.intent.call_id for r in records if r and r.intent) == ["c1", "c1", "c2"]
