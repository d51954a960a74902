"""The LangChain/LangGraph adapter end to end: the real broker and EVERY service (capture,
resume-cache, sessions, audit, projector), each its own process (``DevStack`` on fresh topics).

1. A LangGraph agent with the one-line callback handler, in this process: its run appears in
   capture (node records equal to what the framework saw: each model call's prompt and answer,
   each tool call's arguments and result), in the resume-cache (a lookup of the run's first
   prompt answers what the model said), in sessions (the thread, every event), in audit (chain
   valid, every event sealed) and in the projector (succeeded, not halted).
2. ``runtrail demo --framework langgraph``: a real LangGraph agent per script through the
   stack, one run SIGKILLed and re-run; the demo's own summary reports no problem.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from runtrail.adapters.langchain import RuntrailCallbackHandler
from runtrail.adapters.langchain_json import chat_prompt, message_json
from runtrail.config import Settings
from runtrail.runtime.registry import SERVICES
from runtrail_tools.demo.script import LANGGRAPH_SCRIPTS
from runtrail_tools.demo.targets import DemoSettings, from_stack
from runtrail_tools.devstack.catchup import wait_caught_up
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import DevStack, StackOptions
from runtrail_tools.devstack.state import StackState
from tests.support import stack_settings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[DevStack, StackState]]:
    home = tmp_path_factory.mktemp("lgstack")
    prefix = f"lg-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        home / "state",
        prefix,
        partitions=3,
    )
    options = StackOptions(
        port_base=find_free_base(SERVICES), manage_broker=False, group_prefix=prefix
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        yield dev, dev.up()
    finally:
        assert dev.down() == []


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order_id, "status": "shipped"}


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


def agent_graph(model: Any) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph  # not at collection
    from langgraph.prebuilt import ToolNode, tools_condition

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup_order, refund]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def test_a_langgraph_run_reaches_every_service(stack: tuple[DevStack, StackState]) -> None:
    from runtrail.audit.store import verify_stored
    from runtrail.capture.reader import iter_records
    from runtrail.persistence import (
        AUDIT_LINKS,
        PROJECTIONS,
        RESUME_ENTRIES,
        SESSION_SNAPSHOTS,
        open_store,
    )
    from runtrail.publisher import Publisher
    from runtrail.resume import ResumeCache
    from runtrail.resume.http_client import ServiceCacheClient

    _, state = stack
    targets = from_stack(state, Settings(tenant="acme"), DemoSettings())
    settings = targets.settings.model_copy(update={"spool_dir": Path(state.state_dir) / "lg-sp"})
    run_id, thread = f"lg-e2e-{uuid.uuid4().hex[:6]}", "thread-e2e"
    answers = iter(
        [
            AIMessage(
                content="looking it up",
                tool_calls=[{"name": "lookup_order", "args": {"order_id": "A7"}, "id": "c-1"}],
                usage_metadata={"input_tokens": 30, "output_tokens": 7, "total_tokens": 37},
            ),
            AIMessage(
                content="refunding",
                tool_calls=[
                    {"name": "refund", "args": {"order_id": "A7", "amount": 20}, "id": "c-2"}
                ],
            ),
            AIMessage(content="Order A7 was refunded 20."),
        ]
    )
    model = GenericFakeChatModel(messages=answers)
    with Publisher(settings) as publisher:
        handler = RuntrailCallbackHandler(publisher, run_id=run_id)  # the one line
        final = agent_graph(model).invoke(
            {"messages": [HumanMessage("refund order A7")]},
            config={"callbacks": [handler], "configurable": {"thread_id": thread}},
        )
        assert publisher.flush(20.0) == 0
    assert handler.failures == 0 and handler.rejected == 0
    lag = wait_caught_up(settings, targets.groups(), settings.events_topic, timeout=120)
    assert not any(lag.values()), lag
    seen = final["messages"]  # what the framework saw, in order
    ai = [(n, m) for n, m in enumerate(seen) if isinstance(m, AIMessage)]
    tools = [m for m in seen if isinstance(m, ToolMessage)]

    state_dir = Path(state.state_dir)
    audit = open_store(AUDIT_LINKS, f"sqlite:///{state_dir / 'audit.db'}")
    projections = open_store(PROJECTIONS, f"sqlite:///{state_dir / 'projection.db'}")
    cache = open_store(RESUME_ENTRIES, f"sqlite:///{state_dir / 'resume-cache.db'}", readers=1)
    sessions = open_store(SESSION_SNAPSHOTS, (state_dir / "sessions").as_uri())
    try:
        # capture: one MODEL record per model call, one TOOL record per tool call, equal to
        # the framework's messages
        records = list(iter_records((state_dir / "capture").as_uri(), run_id, None, "acme"))
        models = sorted((r for r in records if r.node_type == "MODEL"), key=lambda r: r.step or 0)
        calls = sorted((r for r in records if r.node_type == "TOOL"), key=lambda r: r.step or 0)
        assert not any(r.incomplete for r in records)
        assert [r.output_text for r in models] == [m.content for _, m in ai]
        assert (
            [r.inputs["messages"] for r in models]
            == [  # type: ignore[index]
                [message_json(p) for p in seen[:n]] for n, _ in ai
            ]
        )
        assert models[0].input_tokens == 30 and models[0].output_tokens == 7
        assert {r.session_id for r in records} == {thread}
        wanted = [
            # capture keeps the whole v2 TOOL_CALL: the adapter sets no ai4j call `type`
            {"callId": c["id"], "toolName": c["name"], "arguments": c["args"], "type": None}
            for _, m in ai
            for c in m.tool_calls
        ]
        assert [r.inputs for r in calls] == wanted
        assert [r.outputs["output"] for r in calls] == [t.content for t in tools]  # type: ignore[index]

        # resume-cache: the run's entries, and a lookup of its first prompt hits the answer
        entries = [e for e in cache.entries("acme") if e.run_id == run_id]
        assert sum(e.kind.value == "model" for e in entries) == len(ai)
        assert sum(e.kind.value == "tool" for e in entries) == len(tools)
        remote = ServiceCacheClient(
            state.services["resume-cache"].api_url or "", targets.tokens["acme"], wait_ms=20_000
        )
        try:
            lookup = ResumeCache(run_id, tenant="acme", remote=remote)
            hit = lookup.lookup_model(
                chat_prompt("generic-fake-chat-model", seen[:1], {"_type": "x", "stop": None})
            )
        finally:
            remote.close()
        assert hit is not None and hit.message == "looking it up"

        # projector: succeeded, not halted
        row = projections.get("acme", run_id)
        assert row is not None and row.status == "succeeded" and not row.halted
        assert row.state is not None and row.state.model_nodes == len(ai)

        # audit: every event sealed, the chain valid
        verdict = verify_stored(audit, "acme", run_id)
        assert verdict.valid and verdict.length == row.version

        # sessions: the LangGraph thread holds the whole run
        snapshot = sessions.load("acme", thread)
        assert snapshot is not None and len(snapshot.event_log) == row.version
    finally:
        for store in (audit, projections, cache, sessions):
            store.close()


def test_the_langgraph_demo_runs_through_the_stack(
    stack: tuple[DevStack, StackState], tmp_path: Path
) -> None:
    _, state = stack
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
    env["RUNTRAIL_SPOOL_DIR"] = str(tmp_path / "spool")
    done = subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", "demo", "--framework", "langgraph",
         "--state-dir", state.state_dir],
        capture_output=True, text=True, timeout=400, env=env,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    assert "LangGraph agent" in out
    for plan in LANGGRAPH_SCRIPTS:
        block = out[out.index(f"/{plan.key}") :]
        tools = len(plan.steps)
        assert re.search(
            rf"capture\s+{tools + 1} model \+ {tools} tool nodes, 0 retries, 0 incomplete", block
        ), block[:800]
        assert re.search(r"projection\s+succeeded at version \d+ \(not halted", block)
        assert re.search(r"audit\s+\d+ links, chain valid", block)
        effects = len(plan.side_effect_steps)
        assert re.search(
            rf"side effects\s+{effects} in the ledger \(each once; script: {effects}\)", block
        )
        if plan.crash_after_step is not None:  # its resume hit every finished step's 2 calls
            hits = 2 * plan.crash_after_step
            assert re.search(rf"resume-cache\s+.*; {hits} cache hits on the resume", block), block[
                :800
            ]
