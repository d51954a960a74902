"""LangGraph's human in the loop and time travel, recorded by ``RuntrailCallbackHandler`` on a
real graph with ``RuntrailCheckpointSaver``, through a real Publisher to the real broker.

What is held: ``interrupt()`` leaves the run waiting for input (``run.input_required`` with the
question), not succeeded, and nothing failed; ``Command(resume=...)`` on the thread continues
the same run (``run.input_received`` with the answer, sequences going on) to ``run.succeeded``;
a tool stopped by an interrupt keeps one intent; a run started from an earlier checkpoint
records LangGraph's address of it in ``run.branched``, and its projection shows it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.tools import tool

from runtrail.adapters.langchain import RuntrailCallbackHandler
from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
from runtrail.projection import replay
from runtrail.publisher import Publisher
from runtrail_tools.ui.markup import lineage
from tests.test_adapter_langchain import publisher, read_back

__all__ = ["publisher"]  # the fixture, shared with the adapter's other tests

pytestmark = [pytest.mark.kafka]


class Order(TypedDict, total=False):
    order: str
    answer: str
    shipped: str


def ask(state: Order) -> dict[str, Any]:
    from langgraph.types import interrupt

    return {"answer": interrupt({"question": f"ship {state['order']} today?"})}


def ship(state: Order) -> dict[str, Any]:
    return {"shipped": f"{state['order']}:{state['answer']}"}


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[RuntrailCheckpointSaver]:
    with RuntrailCheckpointSaver.from_url((tmp_path / "threads").as_uri(), tenant_id="acme") as s:
        yield s


def order_graph(saver: RuntrailCheckpointSaver) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Order)
    graph.add_node("ask", ask)
    graph.add_node("ship", ship)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "ship")
    graph.add_edge("ship", END)
    return graph.compile(checkpointer=saver)


def test_an_interrupt_waits_for_input_and_the_resume_continues_the_run(
    publisher: Publisher, saver: RuntrailCheckpointSaver
) -> None:
    from langgraph.types import Command

    handler = RuntrailCallbackHandler(publisher)
    graph = order_graph(saver)
    config: Any = {"callbacks": [handler], "configurable": {"thread_id": "order-42"}}

    stopped = graph.invoke({"order": "4711"}, config)
    (pending,) = stopped["__interrupt__"]
    first = read_back(publisher, expect=3)
    assert [e.type for e in first] == [
        "run.accepted", "run.state_transitioned", "run.input_required",
    ]  # fmt: skip
    wait = first[-1].data
    assert (wait.request_id, wait.prompt) == (pending.id, {"question": "ship 4711 today?"})
    waiting = replay(first)
    assert waiting.status == "awaiting_input"
    assert f"waiting for input: request <code>{pending.id}</code>" in lineage(waiting.json_form())

    done = graph.invoke(Command(resume="yes"), config)
    assert done["shipped"] == "4711:yes"
    events = read_back(publisher, expect=6)
    assert handler.failures == 0 and handler.rejected == 0
    assert {e.run_id for e in events} == {first[0].run_id}  # one run across the wait
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5, 6]
    assert [e.type for e in events][3:] == ["run.input_received", "STEP_END", "run.succeeded"]
    assert (events[3].data.request_id, events[3].data.input) == (pending.id, "yes")
    assert "run.failed" not in {e.type for e in events}
    projection = replay(events)
    assert projection.status == "succeeded" and projection.pending_input is None


@tool
def confirm(order: str) -> str:
    """Ask a human to confirm shipping the order."""
    from langgraph.types import interrupt

    return f"{order}: {interrupt(f'confirm {order}?')}"


def test_a_tool_stopped_by_an_interrupt_is_not_failed_and_records_one_intent(
    publisher: Publisher, saver: RuntrailCheckpointSaver
) -> None:
    from langgraph.graph import START, StateGraph
    from langgraph.types import Command

    def call(state: Order) -> dict[str, Any]:
        tool_call = {"name": "confirm", "args": {"order": state["order"]}, "id": "tc-7"}
        return {"shipped": confirm.invoke({**tool_call, "type": "tool_call"}).content}

    builder = StateGraph(Order)
    builder.add_node("call", call)
    builder.add_edge(START, "call")
    graph = builder.compile(checkpointer=saver)
    handler = RuntrailCallbackHandler(publisher)
    config: Any = {"callbacks": [handler], "configurable": {"thread_id": "order-7"}}

    graph.invoke({"order": "7"}, config)
    graph.invoke(Command(resume="confirmed"), config)
    events = read_back(publisher, expect=8)
    assert [e.type for e in events] == [
        "run.accepted", "run.state_transitioned", "TOOL_CALL", "run.input_required",
        "run.input_received", "TOOL_RESULT", "STEP_END", "run.succeeded",
    ]  # fmt: skip
    assert len({e.run_id for e in events}) == 1
    call, result = events[2].data, events[5].data
    assert call.call_id == result.call_id == "tc-7"
    assert result.error is None and "7: confirmed" in str(result.output)
    assert replay(events).status == "succeeded"


def test_a_run_from_an_earlier_checkpoint_records_where_it_branched_from(
    publisher: Publisher, saver: RuntrailCheckpointSaver
) -> None:
    from langgraph.types import Command

    handler = RuntrailCallbackHandler(publisher)
    graph = order_graph(saver)
    thread: Any = {"configurable": {"thread_id": "order-9"}}
    graph.invoke({"order": "9"}, {**thread, "callbacks": [handler]})
    graph.invoke(Command(resume="yes"), {**thread, "callbacks": [handler]})
    before_ship = next(s for s in graph.get_state_history(thread) if s.next == ("ship",))
    fork = graph.update_state(before_ship.config, {"answer": "no"})

    forked = graph.invoke(None, {**fork, "callbacks": [handler]})
    assert forked["shipped"] == "9:no"
    events = read_back(publisher, expect=6 + 4)
    runs = list(dict.fromkeys(e.run_id for e in events))
    assert len(runs) == 2
    branch = [e for e in events if e.run_id == runs[1]]
    assert [e.type for e in branch] == [
        "run.accepted", "run.branched", "run.state_transitioned", "run.succeeded",
    ]  # fmt: skip
    address = fork["configurable"]
    assert branch[1].data.branched_from == {
        "thread_id": "order-9",
        "checkpoint_ns": "",
        "checkpoint_id": address["checkpoint_id"],
    }
    projection = replay(branch)
    assert projection.branched_from == branch[1].data.branched_from
    assert projection.status == "succeeded"
    # the explorer's run page says so, from the projection's JSON form
    shown = lineage(projection.json_form())
    assert "a fork: branched from a saved state" in shown
    assert f"checkpoint_id <code>{address['checkpoint_id']}</code>" in shown
