"""``runtrail erase`` deletes the derived plaintext copies it is told of (session snapshots,
their large snapshots' blobs on files or S3, LangGraph checkpoints) with the content, and
leaves other sessions and threads alone; with no key left to destroy and no copy, it says
there was nothing to erase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.events import validate_json_form
from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, SESSION_SNAPSHOTS, open_store
from runtrail.privacy.reference import ERASED
from runtrail.privacy.vault import ContentVault
from runtrail.sessions import AgentSession, AgentSessionSnapshot
from runtrail.sessions.blobs import SnapshotBlobStore
from tests.sessions_support import built_snapshot, session_forms

SENTINEL = "SENTINEL-copies-44aa"


def runtrail(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def checkpoint(saver: RuntrailCheckpointSaver, thread: str) -> None:
    state = empty_checkpoint()
    state["channel_values"] = {"answer": SENTINEL}
    state["channel_versions"] = {"answer": saver.get_next_version(None, None)}
    saver.put(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        state,
        {"source": "input", "step": -1},
        state["channel_versions"],
    )


def large_snapshot(session: str, secret: str) -> AgentSessionSnapshot:
    """A snapshot over the inline limit whose first prompt (a field kept inline) holds
    ``secret``."""
    forms = session_forms(12, session=session, payload=300_000)
    forms[0]["data"]["prompt"]["messages"].append(secret)
    built = AgentSession("t1", session)
    for offset, form in enumerate(forms):
        built.apply(validate_json_form(form), source=("events", 0, offset))
    return built.snapshot()


def blob_bytes(blobs: SnapshotBlobStore) -> dict[str, bytes]:
    """Every blob the store holds, read back through its own listing."""
    return {o.key: blobs._get(o.key) for o in blobs.objects()}


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_erase_deletes_the_large_snapshots_of_the_named_session(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    blobs_url = (
        (tmp_path / "blobs").as_uri() if backend == "file" else request.getfixturevalue("s3_url")
    )
    blobs = SnapshotBlobStore(blobs_url)
    erased = [large_snapshot("s1", f"{SENTINEL}-{n}") for n in range(2)]  # two saves of s1
    kept = large_snapshot("s2", "KEPT-blob")
    for snapshot in (*erased, kept):
        blobs.put(snapshot)
    stored = blob_bytes(blobs)
    assert len(stored) == 3 and all(len(b) > 1_000_000 for b in stored.values())
    assert sum(SENTINEL.encode() in b for b in stored.values()) == 2  # the scan can fail

    done = runtrail(
        env,
        *("erase", "--tenant", "t1", "--run", "run-a", "--reason", "asked"),
        *("--no-event", "--no-topics", "--session", "s1", "--session-blobs", blobs_url),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["copiesDeleted"] == {"sessions": 0, "sessionBlobs": 2}
    left = blob_bytes(blobs)
    assert not [k for k, b in left.items() if SENTINEL.encode() in b]
    assert list(left) == [blobs.key_of(kept)]
    assert blobs.get(f"{blobs.base}/{blobs.key_of(kept)}", kept.digest).session_id == "s2"
    if backend == "file":  # no folder names the erased session either
        assert [p.name for p in (tmp_path / "blobs" / "t1").iterdir()] == ["s2"]


def test_erase_deletes_the_named_sessions_and_threads(tmp_path: Path) -> None:
    env = {
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    ref = vault.put("t1", "run-1", SENTINEL)
    sessions_url = (tmp_path / "sessions").as_uri()
    sessions = open_store(SESSION_SNAPSHOTS, sessions_url)
    for name in ("s1", "s2"):
        assert sessions.save(built_snapshot(12, session=name))
    checkpoints_url = (tmp_path / "checkpoints").as_uri()
    with RuntrailCheckpointSaver.from_url(checkpoints_url, tenant_id="t1") as saver:
        checkpoint(saver, "thread-erased")
        checkpoint(saver, "thread-kept")

    done = runtrail(
        env,
        *(
            "erase",
            "--tenant",
            "t1",
            "--run",
            "run-1",
            "--reason",
            "asked",
            "--no-event",
            "--no-topics",
        ),
        *("--session", "s1", "--sessions-store", sessions_url),
        *("--thread", "thread-erased", "--checkpoints-store", checkpoints_url),
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["copiesDeleted"] == {"sessions": 1, "checkpoints": 1, "sessionBlobs": 0}
    assert report["objectsDeleted"] == 1 and report["eventId"] is None

    assert vault.resolve("t1", ref) == ERASED
    assert sessions.load("t1", "s1") is None and sessions.load("t1", "s2") is not None
    with RuntrailCheckpointSaver.from_url(checkpoints_url, tenant_id="t1") as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "thread-erased"}}) is None
        kept = saver.get_tuple({"configurable": {"thread_id": "thread-kept"}})
        assert kept is not None and kept.checkpoint["channel_values"]["answer"] == SENTINEL
    sessions.close()

    again = runtrail(
        env, "erase", "--tenant", "t1", "--run", "run-1", "--reason", "x", "--no-topics"
    )
    assert again.returncode == 1 and "nothing to erase" in again.stderr


def test_keys_rotate_rewraps_and_retires_without_touching_content(tmp_path: Path) -> None:
    env = {
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    refs = [vault.put("t1", f"run-{n}", f"{SENTINEL}-{n}") for n in range(2)]
    vault.close()
    content = {p: p.read_bytes() for p in (tmp_path / "content").rglob("*") if p.is_file()}
    done = runtrail(env, "keys", "rotate", "--tenant", "t1", "--retire")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tenant": "t1", "rewrapped": 2, "retired": ["1"]}
    assert [p.name for p in (tmp_path / "keys" / "tenants" / "t1").iterdir()] == ["2.key"]
    fresh = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    assert [fresh.resolve("t1", r) for r in refs] == [f"{SENTINEL}-0", f"{SENTINEL}-1"]
    assert content == {p: p.read_bytes() for p in (tmp_path / "content").rglob("*") if p.is_file()}
    fresh.close()
