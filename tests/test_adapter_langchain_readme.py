"""The LangChain/LangGraph examples ("Point your agent at runtrail"), executed exactly as
written: each code block is extracted from docs/ADAPTERS.md and run against the real broker (and, for
the resumable one, a running resume-cache service), with the user's parts — the graph, the
model, the tools — supplied by the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from runtrail.events import EventCodec
from tests import readme_blocks as blocks
from tests.resume_support import TOKENS, CacheService, make_topics
from tests.support import consume_all, create_topic, unique_topic

pytestmark = [pytest.mark.kafka]

README = blocks.README


def readme_block(which: str) -> str:
    marker = f"<!-- tested as written by tests/test_adapter_langchain_readme.py ({which}) -->"
    return blocks.readme_block(marker, what=f"LangChain {which} example")


def build_graph(model: Any, tools: list[Any]) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph  # not at collection
    from langgraph.prebuilt import ToolNode, tools_condition

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def events_of(bootstrap: str, topic: str, expect: int) -> list[Any]:
    codec = EventCodec()
    return [codec.decode(m.value()).event for m in consume_all(bootstrap, topic, expect=expect)]


def test_the_readme_observe_example_runs_as_written(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("lcreadme"), partitions=1)
    monkeypatch.setenv("RUNTRAIL_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("RUNTRAIL_EVENTS_TOPIC", topic)
    monkeypatch.setenv("RUNTRAIL_TENANT", "acme")
    monkeypatch.setenv("RUNTRAIL_SPOOL_DIR", str(tmp_path / "spool"))

    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"{order_id}: shipped"

    answers = iter(
        [
            AIMessage(
                "", tool_calls=[{"name": "lookup_order", "args": {"order_id": "A7"}, "id": "1"}]
            ),
            AIMessage("A7 has shipped"),
        ]
    )
    namespace: dict[str, Any] = {
        "graph": build_graph(GenericFakeChatModel(messages=answers), [lookup_order])
    }
    exec(compile(readme_block("observe"), str(README), "exec"), namespace)  # as written

    assert namespace["result"]["messages"][-1].content == "A7 has shipped"
    events = events_of(kafka_bootstrap, topic, expect=12)
    assert [e.type for e in events if not e.type.startswith("run.")] == [
        "MODEL_REQUEST", "MODEL_RESPONSE", "STEP_END", "TOOL_CALL", "TOOL_RESULT", "STEP_END",
        "MODEL_REQUEST", "MODEL_RESPONSE", "STEP_END",
    ]  # fmt: skip
    assert {e.session_id for e in events} == {"support-42"}
    assert {e.tenant_id for e in events} == {"acme"}
    assert events[-1].type == "run.succeeded"


class CountingModel(BaseChatModel):
    """Asks for a refund, then confirms; ``calls`` counts real calls."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "counting"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        if isinstance(messages[-1], ToolMessage):
            message = AIMessage(content="refunded")
        else:
            call = {"name": "refund", "args": {"order_id": "A7"}, "id": "r-1"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


@pytest.fixture
def service(kafka_bootstrap: str, tmp_path: Path) -> Iterator[CacheService]:
    events, cache = make_topics(kafka_bootstrap, "lcreadme")
    svc = CacheService(kafka_bootstrap, events, cache, tmp_path).start()
    try:
        yield svc
    finally:
        svc.stop()


def test_the_readme_resume_example_runs_as_written(
    service: CacheService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refunds = tmp_path / "refunds.txt"

    @tool
    def refund(order_id: str) -> str:
        """Refund an order (a side effect: one line per refund)."""
        with refunds.open("a") as out:
            out.write(f"{order_id}\n")
        return f"refunded {order_id}"

    for name, value in {
        "RUNTRAIL_BOOTSTRAP_SERVERS": service.bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": service.events_topic,
        "RUNTRAIL_TENANT": "acme",
        "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
        "RUN_ID": "readme-lc-1",
        "RESUME_CACHE_URL": service.url,
        "RESUME_CACHE_TOKEN": TOKENS["acme"],
    }.items():
        monkeypatch.setenv(name, value)

    lives = []
    for _ in range(2):  # the run, then a re-run of the same run ID in a new "process"
        model = CountingModel()
        namespace: dict[str, Any] = {
            "build_graph": build_graph,
            "my_model": model,
            "my_tools": [refund],
            "inputs": {"messages": [("user", "refund order A7")]},
        }
        exec(compile(readme_block("resume"), str(README), "exec"), namespace)  # as written
        assert namespace["result"]["messages"][-1].content == "refunded"
        lives.append((model.calls, namespace["run"].cache.counters))

    (first_calls, first), (second_calls, second) = lives
    assert first_calls == 2 and (first.model_hits, first.tool_hits) == (0, 0)
    assert second_calls == 0 and (second.model_hits, second.tool_hits) == (2, 1)
    assert refunds.read_text().splitlines() == ["A7"]  # the refund happened once
    events = events_of(service.bootstrap, service.events_topic, expect=12)
    types = [e.type for e in events]
    # the re-run published nothing: not a second run.accepted, nor a second run.succeeded
    assert types.count("run.accepted") == types.count("run.succeeded") == 1
    sequences = sorted(e.sequence for e in events)
    assert sequences == list(range(1, len(events) + 1))
