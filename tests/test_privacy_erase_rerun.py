"""An erasure that stops half-way is finished by running it again.

A data subject's copies are found by the references its data key sealed, and the key is
destroyed before the copies are deleted. So ``runtrail erase`` searches the session and
checkpoint stores first and records what they found in the erasure journal beside the key
store. Here the PostgreSQL session store fails mid-erasure (a trigger raises on delete, as a
database that goes away after the search read it): the command fails with a clear message
after the key is destroyed, the session's snapshot, its blob and the checkpoint thread still
there, none of them findable by the key any more. Once the database takes writes again, the
same command finishes from the journal: no store holds the sentinel, another subject's copies
stay, and the journal is gone (a third run has nothing to erase)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, SESSION_SNAPSHOTS, open_store
from runtrail.privacy.vault import ContentVault
from runtrail.sessions.blobs import SnapshotBlobStore
from runtrail.sessions.store_postgres import TABLE as SESSIONS_TABLE
from tests.support import runtrail_cli
from tests.test_privacy_erase_copies import session_of
from tests.test_privacy_erase_threads import checkpoint_holding, threads_with

SENTINEL = "SENTINEL-rerun-5d93"
KEPT = "KEPT-rerun-a170"


def files_with(root: Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def sentinel_sessions(url: str, needle: str) -> list[str]:
    """The sessions of t1 whose stored snapshot holds ``needle``."""
    with open_store(SESSION_SNAPSHOTS, url) as store:
        found = []
        for summary in store.list("t1"):
            snapshot = store.load("t1", summary.session_id)
            if snapshot is not None and needle.encode() in snapshot.to_bytes():
                found.append(summary.session_id)
        return found


def refuse_deletes(url: str, refuse: bool) -> None:
    """The session store's table refuses to delete (a real PostgreSQL error, raised by a
    trigger), or deletes again: the store failing after the erasure's search read it."""
    with psycopg.connect(url, autocommit=True) as admin:
        if refuse:
            admin.execute(
                "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'the session store is out of service'; END $$"
            )
            admin.execute(
                f"CREATE TRIGGER refuse BEFORE DELETE ON {SESSIONS_TABLE} "
                "FOR EACH ROW EXECUTE FUNCTION refuse_delete()"
            )
        else:
            admin.execute(f"DROP TRIGGER refuse ON {SESSIONS_TABLE}")


def test_an_erasure_stopped_half_way_is_finished_by_running_it_again(
    tmp_path: Path, postgres_url: str
) -> None:
    env = {
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    erased_ref = str(vault.put("t1", "user-7", "sealed content"))
    kept_ref = str(vault.put("t1", "user-8", "other sealed content"))
    vault.close()
    sessions_url = postgres_url
    checkpoints_url = (tmp_path / "checkpoints").as_uri()
    blobs_dir = tmp_path / "blobs"
    # The subject's session holds its reference and, in a field kept inline, the sentinel.
    erased = session_of("run-1", "s-user-7", f"{erased_ref} {SENTINEL}")
    kept = session_of("run-2", "s-user-8", f"{kept_ref} {KEPT}")
    with open_store(SESSION_SNAPSHOTS, sessions_url) as store:
        for snapshot in (erased, kept):
            assert store.save(snapshot)
    blobs = SnapshotBlobStore(blobs_dir.as_uri())
    for snapshot in (erased, kept):
        blobs.put(snapshot)
    with RuntrailCheckpointSaver.from_url(checkpoints_url, tenant_id="t1") as saver:
        checkpoint_holding(saver, "th-user-7", f"{erased_ref} {SENTINEL}")
        checkpoint_holding(saver, "th-user-8", f"{kept_ref} {KEPT}")
    command = (
        *("erase", "--tenant", "t1", "--subject", "user-7", "--reason", "asked"),
        *("--no-event", "--no-topics", "--sessions-store", sessions_url),
        *("--session-blobs", blobs_dir.as_uri(), "--checkpoints-store", checkpoints_url),
    )
    assert len(files_with(tmp_path, SENTINEL)) == 1  # the blob
    assert sentinel_sessions(sessions_url, SENTINEL) == ["s-user-7"]
    assert threads_with(checkpoints_url, "t1", SENTINEL) == {"th-user-7"}

    refuse_deletes(postgres_url, True)
    try:
        stopped = runtrail_cli(env, *command)
    finally:
        refuse_deletes(postgres_url, False)
    assert stopped.returncode == 3, stopped.stderr
    assert "stopped before it finished, at sessions" in stopped.stderr
    assert "out of service" in stopped.stderr and "run the same command again" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    # Half-way: the key is destroyed, every copy is left.
    assert sentinel_sessions(sessions_url, SENTINEL) == ["s-user-7"]
    assert len(files_with(blobs_dir, SENTINEL)) == 1
    assert threads_with(checkpoints_url, "t1", SENTINEL) == {"th-user-7"}

    finished = runtrail_cli(env, *command)
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert report["keyId"] == erased_ref.split(":")[3]  # the key the first run destroyed
    assert report["copiesDeleted"] == {"sessions": 1, "sessionBlobs": 1, "checkpoints": 1}
    assert files_with(tmp_path, SENTINEL) == []
    assert sentinel_sessions(sessions_url, SENTINEL) == []
    assert threads_with(checkpoints_url, "t1", SENTINEL) == set()
    assert sentinel_sessions(sessions_url, KEPT) == ["s-user-8"]
    assert len(files_with(blobs_dir, KEPT)) == 1
    assert threads_with(checkpoints_url, "t1", KEPT) == {"th-user-8"}

    again = runtrail_cli(env, *command)
    assert again.returncode == 1 and "nothing to erase" in again.stderr
