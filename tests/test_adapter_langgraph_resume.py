"""A LangGraph wait resumed by another process continues the same runtrail run, and a fork names
the run it came from: ``RuntrailCallbackHandler(publisher, checkpointer=saver)`` stamps the
thread's checkpoint, on a real graph, through real Publishers to the real broker.

What is held: the first life (its own handler and publisher, closed) stops at ``interrupt()``;
a second handler and publisher — or a second OS process — resume the thread from the same
checkpoint store: one run, sequences 1..N with no gap or repeat, the projection waiting then
succeeded, the audit chain one and unbroken; a tool stopped by the interrupt keeps one intent
across the two processes; it holds with LangGraph's own ``InMemorySaver`` too; a fork from a
state the run wrote records that run as its ``parentRunId``, and the explorer links it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from runtrail.adapters.langchain import RuntrailCallbackHandler
from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.audit.chain import HashChainedEventLog
from runtrail.config import Settings
from runtrail.projection import replay, replay_runs
from runtrail.publisher import Publisher
from runtrail_tools.ui.markup import lineage
from tests.test_adapter_langchain import publisher, read_back
from tests.test_adapter_langgraph_interrupt import Order, order_graph

__all__ = ["publisher"]  # the fixture, shared with the adapter's other tests

pytestmark = [pytest.mark.kafka]

ROOT = Path(__file__).resolve().parent.parent
THREAD: Any = {"configurable": {"thread_id": "order-42"}}


def another_publisher(first: Publisher, spool: Path) -> Publisher:
    """A second process's publisher: same broker and topic, its own spool."""
    settings = Settings(
        bootstrap_servers=first._settings.bootstrap_servers,
        events_topic=first.topic,
        tenant="acme",
        spool_dir=spool,
    )
    return Publisher(settings)


@pytest.fixture
def store(tmp_path: Path) -> str:
    return (tmp_path / "threads").as_uri()


@pytest.fixture
def second(publisher: Publisher, tmp_path: Path) -> Iterator[Publisher]:
    pub = another_publisher(publisher, tmp_path / "spool-2")
    try:
        yield pub
    finally:
        pub.close()


def first_life(bootstrap: str, topic: str, spool: str, store: str) -> None:
    """The first process: the order graph stops at its question; the publisher is closed."""
    settings = Settings(
        bootstrap_servers=bootstrap, events_topic=topic, tenant="acme", spool_dir=Path(spool)
    )
    with (
        Publisher(settings) as pub,
        RuntrailCheckpointSaver.from_url(store, tenant_id="acme") as saver,
    ):
        handler = RuntrailCallbackHandler(pub, checkpointer=saver)
        stopped = order_graph(saver).invoke({"order": "4711"}, {**THREAD, "callbacks": [handler]})
        assert stopped["__interrupt__"] and handler.failures == 0
        assert pub.flush(20.0) == 0


def resume_elsewhere(pub: Publisher, store: str, answer: str = "yes") -> dict[str, Any]:
    """Another process resumes the thread: its own saver on the same store, its own handler."""
    from langgraph.types import Command

    with RuntrailCheckpointSaver.from_url(store, tenant_id="acme") as saver:
        handler = RuntrailCallbackHandler(pub, checkpointer=saver)
        done: dict[str, Any] = order_graph(saver).invoke(
            Command(resume=answer), {**THREAD, "callbacks": [handler]}
        )
        assert handler.failures == 0 and handler.rejected == 0
        return done


def assert_one_run_waiting_then_succeeded(events: list[Any], first_part: int) -> None:
    assert len({e.run_id for e in events}) == 1
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    waiting = replay(events[:first_part])
    assert waiting.status == "awaiting_input"
    whole = replay_runs(events)
    assert not whole.halted and whole.skipped == 0
    (projection,) = whole.projections.values()
    assert projection.status == "succeeded" and projection.pending_input is None
    chain = HashChainedEventLog()  # the audit service's chain of the run: one, unbroken
    for event in events:
        chain.append(event)
    verdict = chain.verify_chain()
    assert verdict.valid and verdict.length == len(events) and chain.sequence == len(events)


def assert_resumed_here(event: Any, *, after: int) -> None:
    """run.resumed names this process and the earlier life's last sequence (the wait)."""
    assert event.type == "run.resumed" and event.sequence == after + 1
    assert (event.data.host, event.data.pid) == (socket.gethostname(), os.getpid())
    assert (event.data.after_sequence, event.data.cached_steps) == (after, 0)


def test_a_wait_is_resumed_by_another_handler_and_publisher_in_the_same_run(
    publisher: Publisher, second: Publisher, store: str, tmp_path: Path
) -> None:
    bootstrap = publisher._settings.bootstrap_servers
    first_life(bootstrap, publisher.topic, str(tmp_path / "spool-1"), store)
    first = read_back(publisher, expect=3)
    assert first[-1].type == "run.input_required"

    done = resume_elsewhere(second, store)
    assert done["shipped"] == "4711:yes"
    events = read_back(second, expect=7)
    assert [e.type for e in events] == [
        "run.accepted", "run.state_transitioned", "run.input_required", "run.resumed",
        "run.input_received", "STEP_END", "run.succeeded",
    ]  # fmt: skip
    assert_resumed_here(events[3], after=3)
    assert events[4].data.request_id == first[-1].data.request_id
    assert events[4].data.input == "yes"
    assert events[4].session_id == first[0].session_id == "order-42"
    assert_one_run_waiting_then_succeeded(events, first_part=3)


def test_a_wait_is_resumed_by_a_second_os_process(
    publisher: Publisher, store: str, tmp_path: Path
) -> None:
    """The first life runs in a child Python process that exits; this one resumes."""
    code = (
        "import sys; from tests.test_adapter_langgraph_resume import first_life; "
        "first_life(*sys.argv[1:])"
    )
    bootstrap = publisher._settings.bootstrap_servers
    args = [bootstrap, publisher.topic, str(tmp_path / "child-spool"), store]
    paths = [ROOT / p for p in ("shared", "services", "tools", "schemas")] + [ROOT]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
    child = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]

    done = resume_elsewhere(publisher, store, answer="tomorrow")
    assert done["shipped"] == "4711:tomorrow"
    events = read_back(publisher, expect=7)
    assert [e.type for e in events][2:5] == [
        "run.input_required", "run.resumed", "run.input_received",
    ]  # fmt: skip
    assert_resumed_here(events[3], after=3)
    assert events[4].data.input == "tomorrow"
    assert_one_run_waiting_then_succeeded(events, first_part=3)


@tool
def confirm(order: str) -> str:
    """Ask a human to confirm shipping the order."""
    from langgraph.types import interrupt

    return f"{order}: {interrupt(f'confirm {order}?')}"


def confirm_graph(saver: Any) -> Any:
    from langgraph.graph import START, StateGraph

    def call(state: Order) -> dict[str, Any]:
        tool_call = {"name": "confirm", "args": {"order": state["order"]}, "id": "tc-7"}
        return {"shipped": confirm.invoke({**tool_call, "type": "tool_call"}).content}

    builder = StateGraph(Order)
    builder.add_node("call", call)
    builder.add_edge(START, "call")
    return builder.compile(checkpointer=saver)


def test_langgraphs_own_saver_carries_the_wait_and_a_stopped_tool_keeps_one_intent(
    publisher: Publisher, second: Publisher
) -> None:
    from langgraph.types import Command

    saver = InMemorySaver()  # the stamp travels in the checkpoint's metadata, any saver keeps it
    config: Any = {"configurable": {"thread_id": "order-7"}}
    first = RuntrailCallbackHandler(publisher, checkpointer=saver)
    confirm_graph(saver).invoke({"order": "7"}, {**config, "callbacks": [first]})
    assert publisher.flush(20.0) == 0
    publisher.close()

    resumed = RuntrailCallbackHandler(second, checkpointer=saver)
    confirm_graph(saver).invoke(Command(resume="confirmed"), {**config, "callbacks": [resumed]})
    assert first.failures == resumed.failures == 0
    events = read_back(second, expect=9)
    assert [e.type for e in events] == [
        "run.accepted", "run.state_transitioned", "TOOL_CALL", "run.input_required",
        "run.resumed", "run.input_received", "TOOL_RESULT", "STEP_END", "run.succeeded",
    ]  # fmt: skip
    assert_resumed_here(events[4], after=4)
    assert events[2].data.call_id == events[6].data.call_id == "tc-7"
    assert_one_run_waiting_then_succeeded(events, first_part=4)


def test_a_fork_names_the_run_that_wrote_its_source_state(
    publisher: Publisher, second: Publisher, store: str
) -> None:
    with RuntrailCheckpointSaver.from_url(store, tenant_id="acme") as saver:
        graph = order_graph(saver)
        handler = RuntrailCallbackHandler(publisher, checkpointer=saver)
        graph.invoke({"order": "9"}, {**THREAD, "callbacks": [handler]})
        assert publisher.flush(20.0) == 0
    resume_elsewhere(second, store)

    with RuntrailCheckpointSaver.from_url(store, tenant_id="acme") as saver:
        graph = order_graph(saver)
        before_ship = next(s for s in graph.get_state_history(THREAD) if s.next == ("ship",))
        fork = graph.update_state(before_ship.config, {"answer": "no"})
        brancher = RuntrailCallbackHandler(second, checkpointer=saver)
        assert graph.invoke(None, {**fork, "callbacks": [brancher]})["shipped"] == "9:no"
        assert brancher.failures == 0
    events = read_back(second, expect=6 + 4)
    source, branch = list(dict.fromkeys(e.run_id for e in events))
    branched = next(e for e in events if e.type == "run.branched")
    assert branched.run_id == branch
    assert branched.data.parent_run_id == source
    projection = replay([e for e in events if e.run_id == branch])
    assert projection.parent_run_id == source and projection.status == "succeeded"
    shown = lineage(projection.json_form())  # the explorer's run page links the source run
    assert 'id="parent-run"' in shown and source in shown
