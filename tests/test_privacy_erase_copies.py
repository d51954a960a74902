"""``runtrail erase`` deletes the derived plaintext copies it is told of (session snapshots,
LangGraph checkpoints) with the content, and leaves other sessions and threads alone; with no
key left to destroy and no copy, it says there was nothing to erase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, SESSION_SNAPSHOTS, open_store
from runtrail.privacy.reference import ERASED
from runtrail.privacy.vault import ContentVault
from tests.sessions_support import built_snapshot

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
    assert report["copiesDeleted"] == {"sessions": 1, "checkpoints": 1}
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
