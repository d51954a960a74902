"""``runtrail erase`` deletes the derived plaintext copies with the content: the snapshots and
large snapshots' blobs (files or S3) of every session holding the erased run or subject —
found in the session store (files or PostgreSQL) and on the sessions topic (a pointer to a
blob by opening the blob) without being named — the sessions and LangGraph checkpoint threads
it is told of, and leaves other sessions and threads alone; with no key left to destroy and no
copy, it says there was nothing to erase."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.config import Settings
from runtrail.events import CURRENT_VERSIONS, validate_json_form
from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, SESSION_SNAPSHOTS, open_store
from runtrail.privacy.reference import ERASED
from runtrail.privacy.vault import ContentVault
from runtrail.sessions import AgentSession, AgentSessionSnapshot, AgentSessionStore
from runtrail.sessions.blobs import SnapshotBlobStore
from runtrail_services.sessions.pointers import PointerPublisher
from tests.sessions_support import built_snapshot, read_pointers, session_forms
from tests.support import create_topic, runtrail_cli, unique_topic

SENTINEL = "SENTINEL-copies-44aa"


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


def session_of(run: str, session: str, secret: str, count: int = 8) -> AgentSessionSnapshot:
    """A session whose events all belong to ``run``; its first prompt holds ``secret`` (a
    field kept inline, or the reference that sealed it)."""
    forms = session_forms(count, session=session, seed=run)
    for form in forms:
        form["runId"] = form["correlationId"] = run
    forms[0]["data"]["prompt"]["messages"].append(secret)
    built = AgentSession("t1", session)
    for offset, form in enumerate(forms):
        built.apply(validate_json_form(form), source=("events", 0, offset))
    return built.snapshot()


def stored_texts(store: AgentSessionStore) -> dict[str, bytes]:
    """Every snapshot the session store holds for t1, by session, as stored."""
    found = {}
    for summary in store.list("t1"):
        snapshot = store.load("t1", summary.session_id)
        assert snapshot is not None
        found[summary.session_id] = snapshot.to_bytes()
    return found


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

    done = runtrail_cli(
        env,
        *("erase", "--tenant", "t1", "--run", "run-a", "--reason", "asked"),
        *("--no-event", "--no-topics", "--session", "s1", "--session-blobs", blobs_url),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["copiesDeleted"] == {
        "sessions": 0,
        "sessionBlobs": 2,
        "checkpoints": 0,
    }
    left = blob_bytes(blobs)
    assert not [k for k, b in left.items() if SENTINEL.encode() in b]
    assert list(left) == [blobs.key_of(kept)]
    assert blobs.get(f"{blobs.base}/{blobs.key_of(kept)}", kept.digest).session_id == "s2"
    if backend == "file":  # no folder names the erased session either
        assert [p.name for p in (tmp_path / "blobs" / "t1").iterdir()] == ["s2"]


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_erase_run_deletes_every_stored_session_that_applied_it(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """No ``--session`` and no broker: the session store says which sessions applied the run
    (a session over the erased run and another loses its snapshot too: it holds the run's
    events), and their blobs go with them; the session of another run stays whole."""
    env = {
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    vault.put("t1", "run-x", SENTINEL)
    vault.close()
    if backend == "file":
        sessions_url, blobs_url = (tmp_path / "sessions").as_uri(), (tmp_path / "blobs").as_uri()
    else:
        sessions_url = str(request.getfixturevalue("postgres_url"))
        blobs_url = request.getfixturevalue("s3_url")
    store = open_store(SESSION_SNAPSHOTS, sessions_url)
    blobs = SnapshotBlobStore(blobs_url)
    only_x = session_of("run-x", "s-only-x", f"{SENTINEL}-1")
    both = AgentSession("t1", "s-both")
    both.restore(session_of("run-y", "s-both", "KEPT-y-in-both"))
    both.merge(session_of("run-x", "s-both", f"{SENTINEL}-2", count=6))
    mixed = both.snapshot()
    other = session_of("run-y", "s-other", "KEPT-other")
    for snapshot in (only_x, mixed, other):
        assert store.save(snapshot)
        blobs.put(snapshot)
    assert sum(SENTINEL.encode() in b for b in stored_texts(store).values()) == 2
    assert set(mixed.last_applied_sequence) == {"run-x", "run-y"}

    done = runtrail_cli(
        env,
        *("erase", "--tenant", "t1", "--run", "run-x", "--reason", "asked", "--no-event"),
        *("--no-topics", "--sessions-store", sessions_url, "--session-blobs", blobs_url),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["copiesDeleted"] == {
        "sessions": 2,
        "sessionBlobs": 2,
        "checkpoints": 0,
    }
    left = stored_texts(store)
    assert list(left) == ["s-other"] and b"KEPT-other" in left["s-other"]
    assert list(blob_bytes(blobs)) == [blobs.key_of(other)]
    store.close()


@pytest.mark.kafka
def test_erase_subject_finds_the_sessions_holding_its_references(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A data subject spans runs the command is not told of: a session whose pointer names a
    blob (no snapshot in the pointer) is found by opening the blob, one that is only in the
    session store by searching the store; both lose pointer, snapshot and blobs. A session
    holding another subject's references keeps all three."""
    topic = create_topic(
        kafka_bootstrap, unique_topic("erase-subj"), 1, **{"cleanup.policy": "compact"}
    )
    env = {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_SESSIONS_TOPIC": topic,
        "RUNTRAIL_RESUME_CACHE_TOPIC": unique_topic("erase-subj-rc"),  # none: nothing cached
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    erased_ref = str(vault.put("t1", "user-7", SENTINEL))
    kept_ref = str(vault.put("t1", "user-8", "KEPT-user-8"))
    vault.close()
    sessions_url, blobs_url = (tmp_path / "sessions").as_uri(), (tmp_path / "blobs").as_uri()
    by_blob = session_of("run-1", "s-by-blob", erased_ref)
    in_store = session_of("run-2", "s-in-store", erased_ref)
    other = session_of("run-3", "s-other", kept_ref)
    store = open_store(SESSION_SNAPSHOTS, sessions_url)
    for snapshot in (in_store, other):
        assert store.save(snapshot)
    blobs = SnapshotBlobStore(blobs_url)
    pointers = PointerPublisher(
        Settings(bootstrap_servers=kafka_bootstrap, sessions_topic=topic),
        blobs=blobs,
        inline_limit=0,  # every snapshot by reference: the pointers hold none
    )
    try:
        for snapshot in (by_blob, other):
            assert pointers.send(snapshot).by_reference
        pointers.flush()
    finally:
        pointers.close()
    assert erased_ref.encode() not in b"".join(
        v or b"" for v in read_pointers(kafka_bootstrap, topic).values()
    )

    done = runtrail_cli(
        env,
        *("erase", "--tenant", "t1", "--subject", "user-7", "--reason", "asked"),
        *("--sessions-store", sessions_url, "--session-blobs", blobs_url),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["eventId"] is None and report["objectsDeleted"] == 1
    assert report["copiesDeleted"] == {
        "cacheTopic": 0,
        "sessionsTopic": 1,  # s-by-blob's pointer (s-in-store has none)
        "sessions": 1,  # s-in-store's snapshot (s-by-blob has none)
        "sessionBlobs": 1,  # s-by-blob's
        "checkpoints": 0,
    }
    latest = read_pointers(kafka_bootstrap, topic)
    assert {k for k, v in latest.items() if v is not None} == {b"t1/s-other"}
    assert list(stored_texts(store)) == ["s-other"]
    assert list(blob_bytes(blobs)) == [blobs.key_of(other)]
    store.close()


def test_the_sessions_service_does_not_save_an_erased_run_back(tmp_path: Path) -> None:
    """The sessions service holds a session of the erased run in memory when the erasure
    deletes its snapshot; on the erasure event it drops it, so the session's next event (of
    another run) starts it afresh instead of saving the erased run's events back."""
    from prometheus_client import CollectorRegistry

    from runtrail.runtime import Delivered, ServiceContext
    from runtrail_services.sessions.service import SessionsService, wall_ms

    state = tmp_path / "state"
    env = {
        "RUNTRAIL_STATE_DIR": str(state),
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    vault.put("t1", "run-x", "sealed")
    vault.close()
    context = ServiceContext(
        settings=Settings(bootstrap_servers="127.0.0.1:1", state_dir=state),
        options={"http_enabled": "false", "publish_pointers": "false", "every_n_events": "1"},
        registry=CollectorRegistry(),
    )
    svc = SessionsService(context)
    erased = session_of("run-x", "s1", SENTINEL, count=4).event_log
    later = session_of("run-y", "s1", "KEPT-later", count=1).event_log
    erasure = {
        **later[0],
        "eventId": "7f7a3a52-0b1c-4d7e-9a57-2d6f1c9f0e11",
        "runId": "run-x",
        "correlationId": "run-x",
        "sequence": "5",
        "type": "run.content_erased",
        "schemaVersion": CURRENT_VERSIONS["run.content_erased"],
        "sessionId": None,
        "turnId": None,
        "step": None,
        "actor": {"kind": "operator", "id": "dpo"},
        "data": {
            "scope": "run",
            "subjectDigest": "sha256:00",
            "reason": "asked",
            "requestedBy": "dpo",
        },
    }

    def feed(forms: list[dict[str, Any]], offset: int) -> None:
        """One turn of the runtime's loop: the batch, then the tick that saves what it made due."""
        svc.process(
            [
                Delivered(validate_json_form(f), f, "events", 0, offset + i, 0, b"k")
                for i, f in enumerate(forms)
            ]
        )
        svc.tick(wall_ms())

    store = open_store(SESSION_SNAPSHOTS, (state / "sessions").as_uri())
    try:
        feed(erased, 0)
        assert SENTINEL.encode() in store.load("t1", "s1").to_bytes()  # type: ignore[union-attr]
        done = runtrail_cli(
            env,
            *("erase", "--tenant", "t1", "--run", "run-x", "--reason", "asked"),
            *("--no-event", "--no-topics"),
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["copiesDeleted"]["sessions"] == 1
        feed([erasure, *later], 4)
        again = store.load("t1", "s1")
        assert again is not None and set(again.last_applied_sequence) == {"run-y"}
        assert SENTINEL.encode() not in again.to_bytes()
    finally:
        svc.close()
        store.close()


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

    done = runtrail_cli(
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

    again = runtrail_cli(
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
    done = runtrail_cli(env, "keys", "rotate", "--tenant", "t1", "--retire")
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
