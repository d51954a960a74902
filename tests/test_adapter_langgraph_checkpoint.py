"""RuntrailCheckpointSaver: a real LangGraph graph interrupted and resumed in a new process,
records refused when edited or moved, tenants kept apart; on the file store and PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.events import canonical_bytes
from runtrail.sessions.checkpoints import CorruptCheckpoint, make_key, open_record, seal_record
from runtrail.sessions.checkpoints_file import FileCheckpointBackend
from runtrail.sessions.checkpoints_postgres import TABLE
from runtrail.sessions.store_file import FileSessionStore
from tests.sessions_support import built_snapshot

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["file", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same tests on each store a session-store URL can name."""
    if request.param == "file":
        return (tmp_path / "sessions").as_uri()
    url: str = request.getfixturevalue("postgres_url")
    return url


def _phase(url: str, tenant: str, thread: str, phase: str, log: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.langgraph_checkpoint_graph"]
    done = subprocess.run(
        [*command, url, tenant, thread, phase, str(log)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_graph_interrupted_in_one_process_resumes_in_another(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "side_effects.log"
    started = _phase(store_url, "acme", "thread-7", "start", log)
    assert started["next"] == ["review"]  # stopped at the interrupt
    assert started["values"]["notes"] == ["planned refund"]

    resumed = _phase(store_url, "acme", "thread-7", "resume", log)
    assert resumed["pid"] != started["pid"]
    assert resumed["next"] == []
    values = resumed["values"]
    assert values["notes"] == ["planned refund", "reviewed: True", "acted"]
    assert values["approved"] is True
    # Values JSON cannot carry came back as themselves, through LangGraph's serializer.
    assert values["tags"] == ["planned", "refund"] and resumed["types"]["tags"] == "set"
    assert values["planned_at"] == "2026-12-01T09:30:00+00:00"
    assert resumed["types"]["planned_at"] == "datetime"
    # plan ran once, in the first process; act once, in the second.
    effects = [line.split() for line in log.read_text().splitlines()]
    assert effects == [["plan", str(started["pid"])], ["act", str(resumed["pid"])]]

    # Another tenant with the same thread ID starts from nothing.
    with RuntrailCheckpointSaver.from_url(store_url, tenant_id="other") as other:
        assert other.get_tuple({"configurable": {"thread_id": "thread-7"}}) is None
        assert list(other.list(None)) == []
    with RuntrailCheckpointSaver.from_url(store_url, tenant_id="acme") as saver:
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None, limit=1)] == [
            "thread-7"
        ]


def _put_one(saver: RuntrailCheckpointSaver, thread: str, value: Any) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"answer": value}
    checkpoint["channel_versions"] = {"answer": saver.get_next_version(None, None)}
    config = saver.put(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        checkpoint,
        {"source": "input", "step": -1},
        checkpoint["channel_versions"],
    )
    saver.put_writes(config, [("answer", "approved")], "task-1")
    return dict(config)


def _edit_fields(document: dict[str, Any], field: str) -> dict[str, Any]:
    """The record with "approved" turned into "rejected" inside one serialized value, its old
    digest kept: what someone editing the store by hand does."""
    typed = document["fields"][field]
    data = base64.b64decode(typed["data"]).replace(b"approved", b"rejected")
    assert data != base64.b64decode(typed["data"])
    document["fields"][field] = {**typed, "data": base64.b64encode(data).decode()}
    return document


def test_an_edited_file_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    url = (tmp_path / "sessions").as_uri()
    saver = RuntrailCheckpointSaver.from_url(url, tenant_id="acme")
    config = _put_one(saver, "t1", "approved")
    assert saver.get_tuple(config) is not None
    backend = saver.backend
    assert isinstance(backend, FileCheckpointBackend)
    blobs = sorted((backend.thread_dir("acme", "t1") / "blob").rglob("*.json"))
    assert len(blobs) == 1
    original = blobs[0].read_bytes()
    blobs[0].write_bytes(orjson.dumps(_edit_fields(orjson.loads(original), "value")))

    with pytest.raises(CorruptCheckpoint) as refused:
        saver.get_tuple(config)
    assert str(blobs[0]) in str(refused.value) and "digest mismatch" in str(refused.value)
    with pytest.raises(CorruptCheckpoint):
        list(saver.list({"configurable": {"thread_id": "t1"}}))

    blobs[0].write_bytes(original)  # restored: readable again, the value intact
    restored = saver.get_tuple(config)
    assert restored is not None and restored.checkpoint["channel_values"] == {"answer": "approved"}


def test_a_record_copied_into_another_tenant_is_refused(tmp_path: Path) -> None:
    url = (tmp_path / "sessions").as_uri()
    acme = RuntrailCheckpointSaver.from_url(url, tenant_id="acme")
    _put_one(acme, "t1", "approved")
    rival = RuntrailCheckpointSaver.from_url(url, tenant_id="rival")
    _put_one(rival, "t1", "denied")
    backend = acme.backend
    assert isinstance(backend, FileCheckpointBackend)
    # Overwrite rival's checkpoint files with acme's (valid digests, wrong place).
    source, target = backend.thread_dir("acme", "t1"), backend.thread_dir("rival", "t1")
    rival_checkpoints = sorted((target / "checkpoint").rglob("*.json"))
    acme_checkpoints = sorted((source / "checkpoint").rglob("*.json"))
    rival_checkpoints[0].write_bytes(acme_checkpoints[0].read_bytes())

    with pytest.raises(CorruptCheckpoint) as refused:
        rival.get_tuple({"configurable": {"thread_id": "t1"}})
    assert "sealed for ('acme'" in str(refused.value)
    assert str(rival_checkpoints[0]) in str(refused.value)


def test_an_edited_or_moved_row_is_refused_naming_the_row(postgres_url: str) -> None:
    saver = RuntrailCheckpointSaver.from_url(postgres_url, tenant_id="acme")
    config = _put_one(saver, "t1", "approved")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        (text,) = conn.execute(f"SELECT record FROM {TABLE} WHERE kind = 'write'").fetchone()
        edited = orjson.dumps(_edit_fields(orjson.loads(text), "value")).decode()
        conn.execute(f"UPDATE {TABLE} SET record = %s WHERE kind = 'write'", (edited,))
    with pytest.raises(CorruptCheckpoint) as refused:
        saver.get_tuple(config)
    message = str(refused.value)
    assert TABLE in message and "'write'" in message and "digest mismatch" in message

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {TABLE} WHERE kind = 'write'")
        conn.execute(f"UPDATE {TABLE} SET tenant_id = 'rival' WHERE kind = 'checkpoint'")
    rival = RuntrailCheckpointSaver.from_url(postgres_url, tenant_id="rival")
    with pytest.raises(CorruptCheckpoint) as moved:
        rival.get_tuple({"configurable": {"thread_id": "t1"}})
    assert "sealed for ('acme'" in str(moved.value)
    assert saver.get_tuple(config) is None  # acme's row is gone from acme, not silently back
    saver.close()
    rival.close()


def test_threads_live_beside_session_snapshots_without_touching_them(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    sessions = FileSessionStore(root)
    snapshot = built_snapshot(3)
    assert sessions.save(snapshot)
    saver = RuntrailCheckpointSaver.from_url(root.as_uri(), tenant_id=snapshot.tenant_id)
    _put_one(saver, snapshot.session_id, "approved")  # a thread with the same ID as the session
    assert [s.session_id for s in sessions.list()] == [snapshot.session_id]
    loaded = sessions.load(snapshot.tenant_id, snapshot.session_id)
    assert loaded is not None and loaded.digest == snapshot.digest
    saver.delete_thread(snapshot.session_id)
    assert saver.get_tuple({"configurable": {"thread_id": snapshot.session_id}}) is None
    assert sessions.load(snapshot.tenant_id, snapshot.session_id) is not None
    modes = {oct(p.stat().st_mode & 0o777) for p in (root / ".threads").rglob("*")}
    assert modes <= {"0o700", "0o600"}, modes  # private, as the session store's files


def test_constructing_from_an_unknown_url_names_it() -> None:
    with pytest.raises(ValueError) as refused:
        RuntrailCheckpointSaver.from_url("s3://user:secret@bucket/x", tenant_id="acme")
    # the registry's one error text: the kind, the URL masked, the schemes it knows
    assert "unsupported LangGraph checkpoint store URL 's3://user:***@bucket/x'" in str(
        refused.value
    )
    assert "file://" in str(refused.value)
    assert "secret" not in str(refused.value)  # the URL is named without its password


@pytest.mark.slow
def test_a_graph_killed_mid_run_continues_from_its_last_checkpoint(tmp_path: Path) -> None:
    """SIGKILL while the graph writes checkpoints: every stored record still reads cleanly, and a
    new process continues from the newest checkpoint to the same end as an uninterrupted run."""
    from tests.langgraph_checkpoint_graph import LOOP_STEPS  # the graph module imports LangGraph

    url = (tmp_path / "sessions").as_uri()
    command = [sys.executable, "-m", "tests.langgraph_checkpoint_graph", url, "acme", "loop-1"]
    running = subprocess.Popen(
        [*command, "loop", str(tmp_path / "unused.log")],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    threads = tmp_path / "sessions" / ".threads"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and running.poll() is None:
            if len(list(threads.glob("acme/loop-1/checkpoint/*/*"))) >= 20:
                break
            time.sleep(0.02)
        assert running.poll() is None, "the graph ended before it could be killed"
        os.kill(running.pid, signal.SIGKILL)
    finally:
        running.wait(30)
    assert running.returncode == -signal.SIGKILL

    with RuntrailCheckpointSaver.from_url(url, tenant_id="acme") as saver:
        config = {"configurable": {"thread_id": "loop-1"}}
        history = list(saver.list(config))  # every record verifies (no CorruptCheckpoint)
        latest = saver.get_tuple(config)
        assert latest is not None and history[0].config == latest.config
        reached = latest.checkpoint["channel_values"]["count"]
        assert 0 < reached < LOOP_STEPS
        assert latest.checkpoint["channel_values"]["trail"] == list(range(1, reached + 1))

    finished = _phase(url, "acme", "loop-1", "rerun", tmp_path / "unused.log")
    assert finished["next"] == []
    assert finished["values"]["count"] == LOOP_STEPS
    assert finished["values"]["trail"] == list(range(1, LOOP_STEPS + 1))  # no step twice


def test_the_documented_example_runs_as_written(tmp_path: Path) -> None:
    text = (REPO / "docs" / "ADAPTERS.md").read_text()
    section = text[text.index("## LangGraph checkpointer") :]
    example = section[section.index("```python\n") + len("```python\n") :]
    example = example[: example.index("```")]
    store = tmp_path / "sessions"
    code = example.replace("file:///tmp/runtrail-sessions", store.as_uri())
    assert code != example  # the example's store URL is the one replaced here
    exec(compile(code, "docs/ADAPTERS.md", "exec"), {"__name__": "adapters_example"})
    with RuntrailCheckpointSaver.from_url(store.as_uri(), tenant_id="acme") as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "order-42"}})
        assert latest is not None and latest.checkpoint["channel_values"]["n"] == 42


def test_the_benchmark_measures_both_savers(tmp_path: Path) -> None:
    from bench.langgraph_checkpoint import measure

    for saver in (InMemorySaver(), RuntrailCheckpointSaver.from_url(tmp_path.as_uri())):
        put_ms, get_ms = measure(saver, 3)
        assert put_ms > 0 and get_ms > 0


def test_hostile_and_long_ids_stay_inside_their_tenant(store_url: str, tmp_path: Path) -> None:
    """IDs become single safe segments (file) or key columns (PostgreSQL): ``..`` and ``/`` never
    name another folder; IDs too long for a file name are stored under a digest and listed back."""
    hostile = "../../rival/t1"
    long_id = "thread-" + "x" * 400
    saver = RuntrailCheckpointSaver.from_url(store_url, tenant_id="acme")
    for thread in (hostile, long_id):
        _put_one(saver, thread, "approved")
        child = {"configurable": {"thread_id": thread, "checkpoint_ns": "sub/../graph:1"}}
        checkpoint = empty_checkpoint()
        saver.put(child, checkpoint, {"source": "loop", "step": 0}, {})
    listed = sorted({t.config["configurable"]["thread_id"] for t in saver.list(None)})
    assert listed == sorted([hostile, long_id])
    for thread in (hostile, long_id):
        latest = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        assert latest is not None and latest.checkpoint["channel_values"] == {"answer": "approved"}
        namespaces = {
            t.config["configurable"]["checkpoint_ns"]
            for t in saver.list({"configurable": {"thread_id": thread}})
        }
        assert namespaces == {"", "sub/../graph:1"}
    with RuntrailCheckpointSaver.from_url(store_url, tenant_id="rival") as rival:
        assert list(rival.list(None)) == []
    if store_url.startswith("file:"):
        threads = Path(tmp_path / "sessions" / ".threads")
        assert sorted(p.name for p in threads.iterdir()) == ["acme"]
        assert not (tmp_path / "rival").exists()
    saver.delete_thread(hostile)
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None, limit=1)] == [long_id]
    saver.close()


def test_a_config_without_a_thread_id_is_refused_with_what_is_missing(tmp_path: Path) -> None:
    saver = RuntrailCheckpointSaver.from_url(tmp_path.as_uri())
    with pytest.raises(ValueError, match=r"configurable\.thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(ValueError, match=r"needs configurable\.checkpoint_id"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("a", 1)], "task")


def test_an_async_graph_checkpoints_through_the_async_methods(postgres_url: str) -> None:
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class Count(TypedDict):
        n: int

    builder = StateGraph(Count)
    builder.add_node("inc", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "inc")

    async def run(saver: Any) -> tuple[int, list[tuple[int, Any]]]:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "async-1"}}
        await graph.ainvoke({"n": 1}, config)
        await graph.ainvoke({"n": 10}, config)
        state = await graph.aget_state(config)
        history = [
            (s.metadata["step"], s.values.get("n")) async for s in graph.aget_state_history(config)
        ]
        return int(state.values["n"]), history

    with RuntrailCheckpointSaver.from_url(postgres_url, tenant_id="acme") as saver:
        n, history = asyncio.run(run(saver))
    assert n == 11
    # The same history as LangGraph's reference saver gives (steps and values, newest first).
    assert (n, history) == asyncio.run(run(InMemorySaver()))
    assert len(history) >= 4


def test_a_sealed_record_is_its_own_canonical_form() -> None:
    """What is stored is exactly the RFC 8785 form of the record, digest included (as for
    session snapshots), so the digest can be checked against the stored bytes."""
    key = make_key("acme", "t1", "blob", "", "messages", "00000000000000000000000000000001.5")
    fields = {"value": {"type": "msgpack", "data": "kqFhoWI="}, "note": ["é", 2.5, None, 10**15]}
    sealed = seal_record(key, fields)
    assert canonical_bytes(orjson.loads(sealed)) == sealed
    assert open_record(sealed, "here") == (key, fields)
    document = orjson.loads(sealed)
    document["fields"]["note"][1] = 3.5
    with pytest.raises(
        CorruptCheckpoint, match="corrupted checkpoint record here: digest mismatch"
    ):
        open_record(canonical_bytes(document), "here")
