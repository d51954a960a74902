"""``runtrail erase`` finds the LangGraph checkpoint threads that hold the erasure, without
``--thread``, and deletes them whole: a real graph run through ``RuntrailCallbackHandler`` and a
real publisher to the broker is found by the runtrail run stamped in its checkpoints, in the
checkpoint store the sessions service uses by default; a thread whose state holds a data
subject's references is found by the destroyed key (files and PostgreSQL, the store named by
``RUNTRAIL_SESSIONS_CHECKPOINTS_URL``). Threads of other runs and subjects stay whole. The graph
state is in the checkpoints as the graph holds it (the serializer's bytes), so the scan decodes
every stored value, and it is shown to find the sentinel before the erasure."""

from __future__ import annotations

import base64
import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import orjson
import pytest
from langchain_core.tools import tool
from langgraph.checkpoint.base import empty_checkpoint

from runtrail.adapters.langchain import RuntrailCallbackHandler
from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.config import Settings
from runtrail.persistence import DATA_KEYS, LANGGRAPH_CHECKPOINTS, PROTECTED_CONTENT, open_store
from runtrail.privacy.vault import ContentVault
from runtrail.publisher import Publisher
from runtrail.sessions.checkpoints import KINDS, Prefix
from runtrail_services.sessions.settings import default_store_url
from tests.support import create_topic, runtrail_cli, unique_topic

SENTINEL = "SENTINEL-threads-7c21"
KEPT = "KEPT-thread-0e4d"


def threads_with(url: str, tenant: str, needle: str) -> set[str]:
    """The threads of ``tenant`` with a stored record holding ``needle``, in the record or in
    any of its values as the serializer wrote them (base64 in the record)."""
    found: set[str] = set()
    with open_store(LANGGRAPH_CHECKPOINTS, url) as backend:
        for kind in KINDS:
            for _, data in backend.scan(Prefix(tenant, kind)):
                record = orjson.loads(data)
                values = [
                    base64.b64decode(v["data"])
                    for v in record["fields"].values()
                    if isinstance(v, dict) and "data" in v
                ]
                if any(needle.encode() in b for b in (data, *values)):
                    found.add(record["key"][1])
    return found


class Notes(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]


@tool
def look_up(topic: str) -> str:
    """Look a topic up."""
    return f"found {topic}"


def notes_graph(saver: RuntrailCheckpointSaver) -> Any:
    """One node: a tool call on the topic (its arguments and result go by reference in the
    events) whose answer the graph keeps in its state (in the checkpoints, as it is)."""
    from langgraph.graph import START, StateGraph  # where a graph is built: not at collection

    def ask(state: Notes) -> Notes:
        call = {"name": "look_up", "args": {"topic": state["topic"]}, "id": "tc-1"}
        return {"notes": [look_up.invoke({**call, "type": "tool_call"}).content]}

    builder = StateGraph(Notes)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=saver)


@pytest.mark.kafka
def test_erase_run_finds_the_threads_the_run_wrote_in_the_default_store(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {
        "RUNTRAIL_STATE_DIR": str(state),
        "RUNTRAIL_CONTENT_STORE_URL": (state / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (state / "keys").as_uri(),
    }
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=create_topic(kafka_bootstrap, unique_topic("erase-th"), partitions=1),
        state_dir=state,
        spool_dir=state / "spool",
        tenant="acme",
        content_store_url=env["RUNTRAIL_CONTENT_STORE_URL"],
        key_store_url=env["RUNTRAIL_KEY_STORE_URL"],
        privacy_policy={"byReference": "all"},
    )
    store = default_store_url(state)  # the sessions service's store: its checkpoints too
    with (
        Publisher(settings) as publisher,
        RuntrailCheckpointSaver.from_url(store, tenant_id="acme") as saver,
    ):
        for run, thread, topic in (
            ("run-erased", "th-erased", SENTINEL),
            ("run-kept", "th-kept", KEPT),
        ):
            handler = RuntrailCallbackHandler(publisher, run_id=run, checkpointer=saver)
            config: Any = {"configurable": {"thread_id": thread}, "callbacks": [handler]}
            assert notes_graph(saver).invoke({"topic": topic}, config)["notes"] == [
                f"found {topic}"
            ]
            assert handler.failures == 0 and handler.rejected == 0
        assert publisher.flush(20.0) == 0
    assert threads_with(store, "acme", SENTINEL) == {"th-erased"}  # the scan can fail

    done = runtrail_cli(
        env,
        *("erase", "--tenant", "acme", "--run", "run-erased", "--reason", "asked"),
        *("--no-event", "--no-topics"),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["copiesDeleted"]["checkpoints"] == 1 and report["objectsDeleted"] >= 1
    assert threads_with(store, "acme", SENTINEL) == set()
    with RuntrailCheckpointSaver.from_url(store, tenant_id="acme") as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "th-erased"}}) is None
        kept = saver.get_tuple({"configurable": {"thread_id": "th-kept"}})
        assert kept is not None and kept.checkpoint["channel_values"]["notes"] == [f"found {KEPT}"]


def checkpoint_holding(saver: RuntrailCheckpointSaver, thread: str, value: str) -> None:
    """A checkpoint written without the handler (no run stamped) whose state holds ``value``."""
    state = empty_checkpoint()
    state["channel_values"] = {"messages": [{"role": "user", "content": value}]}
    state["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    saver.put(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        state,
        {"source": "input", "step": -1},
        state["channel_versions"],
    )


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_erase_subject_finds_the_threads_holding_its_references(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """No run names these threads: the destroyed key's references in their state do."""
    checkpoints = (
        (tmp_path / "checkpoints").as_uri()
        if backend == "file"
        else str(request.getfixturevalue("postgres_url"))
    )
    env = {
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
        "RUNTRAIL_SESSIONS_CHECKPOINTS_URL": checkpoints,
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    erased_ref = str(vault.put("t1", "user-7", SENTINEL))
    kept_ref = str(vault.put("t1", "user-8", KEPT))
    vault.close()
    with RuntrailCheckpointSaver.from_url(checkpoints, tenant_id="t1") as saver:
        checkpoint_holding(saver, "th-user-7", erased_ref)
        checkpoint_holding(saver, "th-user-8", kept_ref)
    with RuntrailCheckpointSaver.from_url(checkpoints, tenant_id="t2") as saver:
        checkpoint_holding(saver, "th-user-7", erased_ref)  # another tenant's: not this erasure
    assert threads_with(checkpoints, "t1", erased_ref) == {"th-user-7"}

    done = runtrail_cli(
        env,
        *("erase", "--tenant", "t1", "--subject", "user-7", "--reason", "asked"),
        *("--no-event", "--no-topics"),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["copiesDeleted"]["checkpoints"] == 1
    assert threads_with(checkpoints, "t1", erased_ref) == set()
    assert threads_with(checkpoints, "t1", kept_ref) == {"th-user-8"}
    assert threads_with(checkpoints, "t2", erased_ref) == {"th-user-7"}
