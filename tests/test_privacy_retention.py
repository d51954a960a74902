"""Retention through ``runtrail prune``: what is older than the limit goes, what is younger
stays, per store (content on files and PostgreSQL, session snapshots, capture days on files and
S3, resume-cache entries), and LangGraph threads keep their latest N checkpoints, still
readable. The services applying the policy themselves: ``tests/test_privacy_retention_services.py``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, SESSION_SNAPSHOTS, open_store
from runtrail.privacy.reference import ERASED
from runtrail.privacy.vault import ContentVault
from tests.sessions_support import built_snapshot, checkpoint_steps, put_checkpoints

OLD_S = time.time() - 40 * 86_400


def prune(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", "prune", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize("backend", ["file", "postgresql"])
def test_old_content_is_pruned_and_reads_as_erased(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        (tmp_path / "content").as_uri()
        if backend == "file"
        else request.getfixturevalue("postgres_url")
    )
    env = {"RUNTRAIL_CONTENT_STORE_URL": url, "RUNTRAIL_KEY_STORE_URL": (tmp_path / "k").as_uri()}
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, url), open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"])
    )
    old = vault.put("t1", "run-old", "old content")
    new = vault.put("t1", "run-new", "new content")
    key = f"t1/{old.key_id}/{old.digest}"
    if backend == "file":
        os.utime(tmp_path / "content" / "t1" / old.key_id / "objects.seg", (OLD_S, OLD_S))
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE runtrail_content SET modified_s = %s WHERE key = %s", (OLD_S, key))
    assert prune(env, "--content", "--older-than", "30") == {"content": 1}
    assert vault.resolve("t1", old) == ERASED
    assert vault.resolve("t1", new) == "new content"
    vault.close()


def test_sessions_and_capture_days_older_than_the_limit_go(tmp_path: Path) -> None:
    sessions_url = (tmp_path / "sessions").as_uri()
    store = open_store(SESSION_SNAPSHOTS, sessions_url)
    for name in ("old", "new"):
        assert store.save(built_snapshot(5, session=name))
    [old_file] = [p for p in (tmp_path / "sessions").rglob("old*") if p.is_file()]
    os.utime(old_file, (OLD_S, OLD_S))
    capture = tmp_path / "capture"
    for day in ("2020-01-01", time.strftime("%Y-%m-%d", time.gmtime())):
        (capture / "t1" / day).mkdir(parents=True)
        (capture / "t1" / day / "records.jsonl").write_text("{}\n")
    done = prune(
        {},
        "--no-topics",
        "--older-than",
        "30",
        "--sessions-store",
        sessions_url,
        "--capture-sink",
        capture.as_uri(),
    )
    assert done == {"sessions": 1, "capture": 1}
    assert [s.session_id for s in store.list()] == ["new"]
    assert [p.name for p in (capture / "t1").iterdir()] == [
        time.strftime("%Y-%m-%d", time.gmtime())
    ]
    store.close()


def test_threads_keep_their_latest_checkpoints(tmp_path: Path) -> None:
    url = (tmp_path / "checkpoints").as_uri()
    for thread in ("a", "b"):
        put_checkpoints(url, "t1", thread, 5)
    done = prune({"RUNTRAIL_TENANT": "t1"}, "--checkpoints-store", url, "--keep-checkpoints", "2")
    assert done == {"checkpointThreads": 2}
    assert [checkpoint_steps(url, "t1", thread) for thread in ("a", "b")] == [[4, 3], [4, 3]]


@pytest.mark.parametrize("backend", ["file", "postgresql"])
def test_every_tenants_threads_keep_their_latest_checkpoints(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What the sessions service applies: every tenant of the store, none named."""
    from runtrail.persistence import LANGGRAPH_CHECKPOINTS
    from runtrail.privacy.retention import prune_every_tenants_checkpoints

    url = (
        (tmp_path / "checkpoints").as_uri()
        if backend == "file"
        else request.getfixturevalue("postgres_url")
    )
    tenants = ["a-tenant-id-" + "x" * 300, "t1"]  # the long one's folder is a digest
    for tenant in tenants:
        put_checkpoints(url, tenant, "a", 4)
    store = open_store(LANGGRAPH_CHECKPOINTS, url)
    try:
        assert store.tenants() == tenants
        assert prune_every_tenants_checkpoints(store, 2) == 2
    finally:
        store.close()
    assert [checkpoint_steps(url, tenant, "a") for tenant in tenants] == [[3, 2], [3, 2]]


def test_capture_days_older_than_the_limit_go_from_s3(s3_url: str) -> None:
    import obstore

    from runtrail.capture.object_sink import ObjectStoreSink

    store = ObjectStoreSink.from_url(s3_url).store
    today = time.strftime("%Y-%m-%d", time.gmtime())
    for day in ("2020-01-01", "2020-01-02", today):
        obstore.put(store, f"t1/{day}/capture-{day}.jsonl", b"{}\n")
    obstore.put(store, "t1/not-a-day/x.jsonl", b"{}\n")
    assert prune({}, "--older-than", "30", "--capture-sink", s3_url) == {"capture": 2}
    left = sorted(m["path"] for page in obstore.list(store) for m in page)
    assert left == [f"t1/{today}/capture-{today}.jsonl", "t1/not-a-day/x.jsonl"]


def test_cache_entries_written_before_the_limit_go(tmp_path: Path) -> None:
    from runtrail.persistence import RESUME_ENTRIES
    from runtrail.resume.entry import CacheEntry
    from runtrail.resume.keys import Kind

    url = f"sqlite:///{tmp_path / 'cache.db'}"
    store = open_store(RESUME_ENTRIES, url)
    store.import_entries(
        CacheEntry("t1", run, Kind.TOOL, f"key-{run}", {"rows": [run]}, tool_name="lookup")
        for run in ("run-old", "run-new")
    )
    db = sqlite3.connect(tmp_path / "cache.db")
    with db:
        db.execute("UPDATE rc_entries SET written_ms = ? WHERE run_id = 'run-old'", (OLD_S * 1000,))
    db.close()
    done = prune({}, "--no-topics", "--older-than", "30", "--cache-store", url)
    assert done == {"cacheEntries": 1}
    assert [e.run_id for e in store.entries("t1")] == ["run-new"]
    store.close()


def test_large_snapshots_uploaded_before_the_limit_go(tmp_path: Path) -> None:
    from runtrail.sessions.blobs import SnapshotBlobStore

    blobs = SnapshotBlobStore((tmp_path / "blobs").as_uri())
    old, new = (built_snapshot(5, session=name, payload=100_000) for name in ("old", "new"))
    blobs.put(old)
    blobs.put(new)
    os.utime(tmp_path / "blobs" / blobs.key_of(old), (OLD_S, OLD_S))
    url = (tmp_path / "blobs").as_uri()
    assert prune({}, "--older-than", "30", "--session-blobs", url) == {"sessionBlobs": 1}
    assert [o.key for o in blobs.objects()] == [blobs.key_of(new)]


def test_large_snapshots_uploaded_before_the_limit_go_from_s3(s3_url: str) -> None:
    from runtrail.privacy.retention import prune_session_blobs
    from runtrail.sessions.blobs import SnapshotBlobStore

    blobs = SnapshotBlobStore(s3_url)
    old, held, new = (
        built_snapshot(5, session=name, payload=100_000) for name in ("old", "held", "new")
    )
    blobs.put(old)
    blobs.put(held)  # as old, but its session is in a service's memory: spared
    cutoff = time.time() + 1.5  # S3 keeps whole seconds
    time.sleep(3)
    blobs.put(new)
    assert prune_session_blobs(blobs, cutoff, spare=[("t1", "held")]) == 1
    assert sorted(o.key for o in blobs.objects()) == sorted(map(blobs.key_of, (held, new)))
