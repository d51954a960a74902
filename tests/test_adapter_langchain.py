"""``RuntrailCallbackHandler`` on real LangChain / LangGraph runs, publishing through a real
Publisher to the real broker; the events are read back from the topic.

What is held: the seed-000 mapping of each callback (MODEL_REQUEST with prompt, model and
parameters; streamed deltas; the final raw response with usage; MODEL_RETRY; TOOL_CALL /
TOOL_RESULT paired by the framework's tool-call ID; STEP_END per LangGraph step), the run-tree
mapping (run, session = thread, turn = root run, step = langgraph_step), the run lifecycle,
redaction, and that nothing the handler meets reaches the agent as an exception.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from runtrail.adapters.langchain import RuntrailCallbackHandler
from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.publisher import Publisher
from tests.support import consume_all, create_topic, unique_topic

pytestmark = [pytest.mark.kafka]


@pytest.fixture
def publisher(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Publisher]:
    topic = create_topic(kafka_bootstrap, unique_topic("lcadapter"), partitions=1)
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        tenant="acme",
        spool_dir=tmp_path / "spool",
    )
    pub = Publisher(settings)
    try:
        yield pub
    finally:
        pub.close()


def read_back(publisher: Publisher, expect: int) -> list[Any]:
    assert publisher.flush(20.0) == 0
    bootstrap = publisher._settings.bootstrap_servers
    codec = EventCodec()
    messages = consume_all(bootstrap, publisher.topic, expect=expect, timeout=30)
    return [codec.decode(m.value()).event for m in messages]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def explode(reason: str) -> str:
    """A tool that fails."""
    raise ValueError(f"boom: {reason}")


def react_graph(model: BaseChatModel, tools: list[Any], *, stream: bool = False) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph  # not at collection
    from langgraph.prebuilt import ToolNode, tools_condition

    def agent(state: MessagesState) -> dict[str, Any]:
        if stream:
            chunks = list(model.stream(state["messages"]))
            merged: AIMessageChunk = chunks[0]
            for chunk in chunks[1:]:
                merged = merged + chunk
            return {"messages": [merged]}
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def test_a_langgraph_run_is_published_as_seed_events(publisher: Publisher) -> None:
    answers = iter(
        [
            AIMessage(
                content="adding",
                tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "tc-1"}],
                usage_metadata={"input_tokens": 11, "output_tokens": 4, "total_tokens": 15},
            ),
            AIMessage(content="the sum is five"),
        ]
    )
    model = GenericFakeChatModel(messages=answers)
    handler = RuntrailCallbackHandler(publisher, run_id="lc-run-1")
    state = react_graph(model, [add]).invoke(
        {"messages": [HumanMessage("add 2 and 3")]},
        config={"callbacks": [handler], "configurable": {"thread_id": "thread-9"}},
    )
    events = read_back(publisher, expect=12)
    assert handler.failures == 0 and handler.rejected == 0
    assert {e.run_id for e in events} == {"lc-run-1"}
    assert {e.session_id for e in events} == {"thread-9"}  # the LangGraph thread
    assert len({e.turn_id for e in events}) == 1  # the root LangChain run
    assert [(e.type, e.step) for e in events if not e.type.startswith("run.")] == [
        ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1), ("STEP_END", 1),
        ("TOOL_CALL", 2), ("TOOL_RESULT", 2), ("STEP_END", 2),
        ("MODEL_REQUEST", 3), ("MODEL_RESPONSE", 3), ("STEP_END", 3),
    ]  # fmt: skip
    types = [e.type for e in events]
    assert types[:2] == ["run.accepted", "run.state_transitioned"]
    assert types[-1] == "run.succeeded" and len(events) == 12

    first, final = events[2].data, events[3].data
    assert first.prompt["model"] == "generic-fake-chat-model"
    assert first.prompt["messages"] == [{"role": "human", "content": "add 2 and 3"}]
    assert final.message == "adding"
    assert final.raw["usage"]["input_tokens"] == 11  # where capture reads token counts
    assert final.raw["generations"][0]["toolCalls"] == [
        {"id": "tc-1", "name": "add", "arguments": {"a": 2, "b": 3}}
    ]
    call, result = events[5].data, events[6].data
    assert (call.call_id, call.tool_name, call.arguments) == ("tc-1", "add", {"a": 2, "b": 3})
    assert (result.call_id, result.output, result.error) == ("tc-1", "5", None)
    # the second prompt is what the framework sent: the conversation so far
    sent = events[8].data.prompt["messages"]
    assert [m["role"] for m in sent] == [m.type for m in state["messages"][:3]]
    assert sent[2] == {"role": "tool", "content": "5", "name": "add", "toolCallId": "tc-1"}


def test_streamed_tokens_are_deltas_and_the_final_response_is_raw(publisher: Publisher) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="one two three")]))
    handler = RuntrailCallbackHandler(publisher, run_id="lc-stream")
    react_graph(model, [add], stream=True).invoke(
        {"messages": [HumanMessage("count")]}, config={"callbacks": [handler]}
    )
    events = read_back(publisher, expect=9)
    responses = [e.data for e in events if e.type == "MODEL_RESPONSE"]
    deltas = [r.message for r in responses if r.raw is None]
    assert "".join(deltas) == "one two three" and len(deltas) > 1
    assert responses[-1].message is None  # the text came as deltas; the end carries raw
    assert responses[-1].raw["generations"][0]["content"] == "one two three"
    assert {e.session_id for e in events} == {"lc-stream"}  # no thread: the run


class Flaky(BaseChatModel):
    """Fails its first call, then answers."""

    failures_left: int = 1

    @property
    def _llm_type(self) -> str:
        return "flaky"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.failures_left:
            self.failures_left -= 1
            raise TimeoutError("upstream timed out")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="ok"))])


def test_retries_tool_errors_and_a_failed_run(publisher: Publisher) -> None:
    from langgraph.graph import START, MessagesState, StateGraph

    handler = RuntrailCallbackHandler(publisher)  # each root invocation is its own run
    model = Flaky().with_retry(stop_after_attempt=2, wait_exponential_jitter=False)
    assert model.invoke("hi", config={"callbacks": [handler]}).content == "ok"

    answers = iter(
        [
            AIMessage(
                content="", tool_calls=[{"name": "explode", "args": {"reason": "x"}, "id": "t1"}]
            ),
            AIMessage(content="it failed"),
        ]
    )
    react_graph(GenericFakeChatModel(messages=answers), [explode]).invoke(
        {"messages": [HumanMessage("go")]}, config={"callbacks": [handler]}
    )

    def broken(state: MessagesState) -> dict[str, Any]:
        raise RuntimeError("the node broke")

    graph = StateGraph(MessagesState)
    graph.add_node("broken", broken)
    graph.add_edge(START, "broken")
    with pytest.raises(RuntimeError, match="the node broke"):
        graph.compile().invoke({"messages": []}, config={"callbacks": [handler]})

    events = read_back(publisher, expect=8 + 11 + 3)
    runs: dict[str, list[Any]] = {}
    for e in events:
        runs.setdefault(e.run_id, []).append(e)
    retried, tooled, failed = runs.values()
    # with_retry: the failed attempt is dropped by MODEL_RETRY; the retry is the same step
    assert [(e.type, e.step) for e in retried[2:]] == [
        ("MODEL_REQUEST", 1), ("MODEL_RETRY", 1), ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1),
        ("STEP_END", 1), ("run.succeeded", 1),
    ]  # fmt: skip
    retry = retried[3].data
    assert (retry.attempt, retry.reason) == (1, "TimeoutError: upstream timed out")
    error = next(e for e in tooled if e.type == "TOOL_RESULT").data
    assert (error.call_id, error.output) == ("t1", None)
    assert error.error == "ValueError: boom: x"
    assert tooled[-1].type == "run.succeeded"
    assert failed[-1].type == "run.failed"
    assert failed[-1].data.reason == "RuntimeError: the node broke"
    assert handler.failures == 0


def test_secrets_are_redacted_and_nothing_reaches_the_agent(
    publisher: Publisher, tmp_path: Path
) -> None:
    handler = RuntrailCallbackHandler(publisher, run_id="lc-safe")
    secret = "sk-" + "A" * 30
    model = GenericFakeChatModel(messages=iter([AIMessage(content="fine"), AIMessage("ok")]))
    model.invoke(f"my key is {secret}", config={"callbacks": [handler]})
    # events the publisher refuses (here: it was closed): counted, the agent goes on
    closed = Publisher(publisher._settings.model_copy(update={"spool_dir": tmp_path / "s2"}))
    closed.close()
    other = RuntrailCallbackHandler(closed, run_id="lc-closed")
    late = GenericFakeChatModel(messages=iter([AIMessage(content="fine")]))
    assert late.invoke("hello", config={"callbacks": [other]}).content == "fine"
    assert (other.rejected, other.failures) == (5, 0)  # accepted .. succeeded; no STEP_END
    # callbacks the framework calls with things the handler cannot use: counted, not raised
    odd, rid = RuntrailCallbackHandler(publisher, run_id="lc-odd"), uuid.uuid4()
    odd.on_chat_model_start(None, [[HumanMessage("q")]], run_id=rid)
    odd.on_llm_end(object(), run_id=rid)  # type: ignore[arg-type]
    odd.on_chat_model_start(None, None, run_id=uuid.uuid4())  # type: ignore[arg-type]
    assert odd.failures == 2

    events = read_back(publisher, expect=6 + 5 + 2)
    request = next(e for e in events if e.run_id == "lc-safe" and e.type == "MODEL_REQUEST")
    assert request.data.prompt["messages"][0]["content"] == "my key is [REDACTED]"
    assert secret not in str([e.json_form() for e in events])
    assert {e.run_id for e in events} == {"lc-safe", "lc-odd"}
    odd_types = [e.type for e in events if e.run_id == "lc-odd"]
    assert odd_types[2:5] == ["MODEL_REQUEST", "STEP_END", "run.succeeded"]  # it still ends


def test_outside_a_graph_each_model_call_is_a_step(publisher: Publisher) -> None:
    handler = RuntrailCallbackHandler(publisher, run_id="lc-chain", session_id="sess-7")
    first = GenericFakeChatModel(messages=iter([AIMessage(content="draft")]))
    second = GenericFakeChatModel(messages=iter([AIMessage(content="final")]))
    chain = first | (lambda m: f"improve: {m.content}") | second
    assert chain.invoke("write", config={"callbacks": [handler]}).content == "final"
    events = read_back(publisher, expect=9)
    assert [(e.type, e.step) for e in events if not e.type.startswith("run.")] == [
        ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1), ("STEP_END", 1),
        ("MODEL_REQUEST", 2), ("MODEL_RESPONSE", 2), ("STEP_END", 2),
    ]  # fmt: skip
    assert {e.session_id for e in events} == {"sess-7"}
