"""``RuntrailTracingProcessor`` on real OpenAI Agents SDK runs (``Agent`` + ``Runner``, a
scripted ``Model`` of the tests' own), publishing through a real Publisher to the real broker;
the events are read back from the topic.

What is held: the span mapping (Generation → MODEL_REQUEST/MODEL_RESPONSE with input, model,
config, output and usage; Function → TOOL_CALL/TOOL_RESULT with the model's call ID; Turn end →
STEP_END; trace → run lifecycle), failures (a failing tool, a model error, a tripped
guardrail), redaction by the Publisher, and that a stalled sink neither slows nor breaks the
agent while every span it could not take is counted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.publisher import Publisher
from tests.support import consume_all, create_topic, unique_topic

# The SDK (and the adapter and support module built on it) is imported by the tests that run
# it: a second of CPU that every test process would otherwise spend collecting this module.
if TYPE_CHECKING:
    from agents import Agent

    from tests.openai_agents_support import Answer

pytestmark = [pytest.mark.kafka]


@pytest.fixture(autouse=True)
def no_other_processors() -> Iterator[None]:
    """Only the processor under test (the SDK's default would try to export to its backend)."""
    from agents.tracing import set_trace_processors

    set_trace_processors([])
    yield
    set_trace_processors([])


@pytest.fixture
def publisher(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Publisher]:
    topic = create_topic(kafka_bootstrap, unique_topic("oaagents"), partitions=1)
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
    codec = EventCodec()
    messages = consume_all(
        publisher._settings.bootstrap_servers, publisher.topic, expect=expect, timeout=30
    )
    return [codec.decode(m.value()).event for m in messages]


def run(agent: Agent[Any], text: str, **config: Any) -> Any:
    from agents import RunConfig, Runner

    return asyncio.run(Runner.run(agent, text, run_config=RunConfig(**config)))


def test_an_agent_run_with_a_tool_is_published_as_seed_events(publisher: Publisher) -> None:
    from agents import Agent

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import ScriptedModel, add, call, say

    registry = CollectorRegistry()
    processor = openai_agents.install(publisher, registry=registry)
    model = ScriptedModel([[call("add", {"a": 2, "b": 3}, "call-7")], [say("the sum is 5")]])
    agent = Agent(name="calc", instructions="add things", model=model, tools=[add])
    result = run(agent, "add 2 and 3", group_id="conv-1", trace_metadata={"user": "u1"})
    assert result.final_output == "the sum is 5"
    processor.force_flush()
    events = read_back(publisher, expect=11)
    assert (processor.dropped, processor.published) == (0, 11)
    assert registry.get_sample_value("runtrail_openai_agents_events_total") == 11

    trace_id = events[0].run_id
    assert trace_id.startswith("trace_")
    assert {(e.run_id, e.turn_id, e.session_id) for e in events} == {(trace_id, trace_id, "conv-1")}
    assert [(e.type, e.step) for e in events] == [
        ("run.accepted", None), ("run.state_transitioned", None),
        ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1),
        ("TOOL_CALL", 1), ("TOOL_RESULT", 1), ("STEP_END", 1),
        ("MODEL_REQUEST", 2), ("MODEL_RESPONSE", 2), ("STEP_END", 2),
        ("run.succeeded", 2),
    ]  # fmt: skip
    assert {e.actor.id for e in events[2:]} == {"calc"}
    assert events[0].data.goal_ref == "openai-agents:Agent workflow"

    request, response = events[2].data.prompt, events[3].data
    assert request["model"] == "scripted-llm-1"
    assert request["input"] == model.inputs[0]  # what the model was sent
    assert request["input"][-1] == {"role": "user", "content": "add 2 and 3"}
    assert isinstance(request["config"], dict)
    assert response.message is None  # a tool call, no text
    assert response.raw["usage"] == {"input_tokens": 12, "output_tokens": 5}
    assert response.raw["output"][0]["call_id"] == "call-7"
    tool_call, tool_result = events[4].data, events[5].data
    assert (tool_call.call_id, tool_call.tool_name, tool_call.arguments) == (
        "call-7", "add", {"a": 2, "b": 3})  # fmt: skip
    assert (tool_result.call_id, tool_result.output, tool_result.error) == ("call-7", 5, None)
    assert events[6].data.reason == "tool_use"
    assert events[7].data.prompt["input"] == model.inputs[1]
    assert events[8].data.message == "the sum is 5"
    assert events[9].data.reason == "final_answer"


def test_the_run_id_and_session_can_be_named_and_secrets_are_redacted(
    publisher: Publisher,
) -> None:
    from agents import Agent

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import ScriptedModel, say

    processor = openai_agents.install(publisher)
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    model = ScriptedModel([[say("ok")]])
    agent = Agent(name="plain", instructions=f"use api key {secret}", model=model)
    run(agent, "hi", trace_metadata={"runtrail_run_id": "my-run-1",
                                     "runtrail_session_id": "sess-9"})  # fmt: skip
    processor.force_flush()
    events = read_back(publisher, expect=6)
    assert {(e.run_id, e.session_id) for e in events} == {("my-run-1", "sess-9")}
    system = events[2].data.prompt["input"][0]["content"]
    assert secret not in system and "use api key" in system  # the Publisher's redactor ran


def test_a_failing_tool_a_model_error_and_a_tripped_guardrail(publisher: Publisher) -> None:
    from agents import (
        Agent,
        GuardrailFunctionOutput,
        InputGuardrailTripwireTriggered,
        input_guardrail,
    )

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import ScriptedModel, call, explode, say

    processor = openai_agents.install(publisher)
    failing = ScriptedModel([[call("explode", {"reason": "x"}, "c-1")], [say("it failed")]])
    agent = Agent(name="fragile", model=failing, tools=[explode])
    assert run(agent, "go").final_output == "it failed"

    broken = ScriptedModel([RuntimeError("upstream 503")])
    with pytest.raises(RuntimeError, match="upstream 503"):
        run(Agent(name="broken", model=broken), "go")

    @input_guardrail
    def no_secrets(ctx: Any, agent: Agent[Any], text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="secret" in str(text))

    guarded = Agent(name="guarded", model=ScriptedModel([[say("never")]]),
                    input_guardrails=[no_secrets])  # fmt: skip
    with pytest.raises(InputGuardrailTripwireTriggered):
        run(guarded, "tell me the secret")
    processor.force_flush()
    events = read_back(publisher, expect=10 + 5 + 3)
    runs: dict[str, list[Any]] = {}
    for e in events:
        runs.setdefault(e.run_id, []).append(e)
    first, second, third = runs.values()

    result = next(e.data for e in first if e.type == "TOOL_RESULT")
    assert result.call_id == "c-1" and result.output is None
    assert "Error running tool" in (result.error or "")  # the span's error, as the SDK set it
    assert "explode" in (result.error or "")
    assert first[-1].type == "run.succeeded"  # the model was told, and answered

    assert [e.type for e in second[2:]] == ["MODEL_REQUEST", "STEP_END", "run.failed"]
    assert second[-2].data.reason == "error"
    assert "upstream 503" in second[-1].data.reason

    assert [e.type for e in third[2:]] == ["run.failed"]
    assert "no_secrets" in third[-1].data.reason


class Gate:
    """A sink that holds every publish until opened, then hands it to the real publisher."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.opened = threading.Event()

    def publish(self, *args: Any, **kwargs: Any) -> str | None:
        self.opened.wait()
        return self.publisher.publish(*args, **kwargs)

    def flush(self, timeout: float = 10.0) -> int:
        return self.publisher.flush(timeout)


def test_a_stalled_sink_neither_slows_nor_breaks_the_agent_and_drops_are_counted(
    publisher: Publisher,
) -> None:
    from agents import Agent
    from agents.tracing import set_trace_processors

    from runtrail.adapters.openai_agents import RuntrailTracingProcessor
    from tests.openai_agents_support import ScriptedModel, add, call, say

    gate = Gate(publisher)
    registry = CollectorRegistry()
    processor = RuntrailTracingProcessor(gate, max_queue=4, registry=registry, gather_s=0.0)
    set_trace_processors([processor])
    model = ScriptedModel([[call("add", {"a": 1, "b": 1}, "c-1")], [say("2")]])
    started = time.monotonic()
    assert run(Agent(name="calc", model=model, tools=[add]), "1+1").final_output == "2"
    took = time.monotonic() - started
    assert took < 2.0  # the worker is stuck on its first publish; the agent is not
    # offered: trace start, 3 span starts (agent, 2 turns), 7 span ends (2 generations, the
    # function, 2 turns, agent, task), trace end = 12. The worker holds what it took before
    # it got stuck, 4 wait in the queue, the rest were dropped: counted, by reason.
    offered = 12
    assert processor.drops == {"queue_full": processor.dropped}
    assert processor.dropped >= offered - 1 - 4 - 4 >= 1  # at most one batch (<= 4) taken
    counted = registry.get_sample_value(
        "runtrail_openai_agents_dropped_total", {"reason": "queue_full"}
    )
    assert counted == processor.dropped
    gate.opened.set()
    processor.shutdown()
    assert processor.dropped + processor.handled == offered  # nothing unaccounted for
    events = read_back(publisher, expect=processor.published)
    assert [e.type for e in events[:2]] == ["run.accepted", "run.state_transitioned"]


def timed_run(agent: Agent[Any], text: str) -> tuple[Any, float]:
    started = time.perf_counter()
    result = run(agent, text)
    return result, time.perf_counter() - started


def test_with_the_broker_down_the_agent_runs_unslowed_and_the_run_arrives_later(
    tmp_path: Path, restartable_broker: Any
) -> None:
    from agents import Agent
    from agents.tracing import set_trace_processors

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import ScriptedModel, add, call, say

    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("oaadown"), partitions=1)
    settings = Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        spool_dir=tmp_path / "spool",
        delivery_timeout_ms=3000,
    )

    def agent() -> Agent[Any]:
        answers: list[Answer] = [[call("add", {"a": 4, "b": 4}, "c-8")], [say("8")]]
        return Agent(name="calc", model=ScriptedModel(answers), tools=[add])

    _, bare = timed_run(agent(), "warm up")  # the SDK's imports and caches, untimed
    _, bare = timed_run(agent(), "4+4")  # the same agent without the processor
    pub = Publisher(settings, retry_backoff_s=0.2, retry_backoff_max_s=1.0)
    try:
        processor = openai_agents.install(pub)
        restartable_broker.stop()
        result, down = timed_run(agent(), "4+4")
        assert result.final_output == "8"  # not broken
        assert down < bare + 0.5, (down, bare)  # not slowed: the broker is not on its path
        processor.force_flush(timeout=20.0)
        deadline = time.monotonic() + 30
        while pub.stats().spooled < 11 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (pub.stats().spooled, processor.dropped) == (11, 0)
        restartable_broker.start()
        assert pub.drain(90), f"spool not drained: {pub.stats()}"
    finally:
        set_trace_processors([])
        pub.close(timeout=10)
    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in consume_all(bootstrap, topic, expect=11)]
    assert [e.type for e in events][:2] == ["run.accepted", "run.state_transitioned"]
    assert [e.sequence for e in events] == list(range(1, 12))
    assert events[-1].type == "run.succeeded"


def by_run(events: list[Any]) -> list[list[Any]]:
    runs: dict[str, list[Any]] = {}
    for e in events:
        runs.setdefault(e.run_id, []).append(e)
    return list(runs.values())


def test_responses_api_retries_handoffs_and_runs_without_turn_spans(publisher: Publisher) -> None:
    from agents import Agent, ModelRetrySettings, ModelSettings, handoff

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import ResponsesModel, ScriptedModel, add, call, say

    processor = openai_agents.install(publisher)
    # 1. the Responses API model (the SDK's default): a Response span
    responses = ResponsesModel([[say("hello")]])
    assert run(Agent(name="resp", model=responses), "hi").final_output == "hello"
    # 2. the SDK's model retry: the first attempt fails, the second answers, same step
    retry = ModelSettings(retry=ModelRetrySettings(max_retries=1, backoff={"initial_delay": 0},
                                                   policy=lambda context: True))  # fmt: skip
    flaky = ScriptedModel([RuntimeError("connection reset"), [say("second try")]])
    agent = Agent(name="flaky", model=flaky, model_settings=retry)
    assert run(agent, "hi").final_output == "second try"
    # 3. a handoff: triage transfers to the specialist, who answers
    specialist = Agent(name="specialist", model=ScriptedModel([[say("done by specialist")]]))
    triage_model = ScriptedModel([[call("transfer_to_specialist", {}, "h-1")]])
    triage = Agent(name="triage", model=triage_model, handoffs=[handoff(specialist)])
    assert run(triage, "help").final_output == "done by specialist"
    # 4. Turn spans off: steps count model calls
    counted = ScriptedModel([[call("add", {"a": 1, "b": 2}, "c-3")], [say("3")]])
    agent = Agent(name="calc", model=counted, tools=[add])
    assert run(agent, "1+2", tracing={"include_task_and_turn_spans": False}).final_output == "3"
    processor.force_flush()
    assert processor.dropped == 0
    first, second, third, fourth = by_run(read_back(publisher, expect=processor.published))

    request, response = first[2].data.prompt, first[3].data
    assert request["model"] == "scripted-llm-1" and request["input"] == responses.inputs[0]
    assert request["input"] == [{"content": "hi", "role": "user"}]
    assert request["config"]["temperature"] == 0.25
    assert response.message == "hello"
    assert response.raw["usage"] == {"input_tokens": 12, "output_tokens": 5}
    assert response.raw["output"][0]["content"][0]["text"] == "hello"

    assert [(e.type, e.step) for e in second[2:]] == [
        ("MODEL_REQUEST", 1), ("MODEL_RETRY", 1), ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1),
        ("STEP_END", 1), ("run.succeeded", 1),
    ]  # fmt: skip
    assert second[3].data.attempt == 1 and "connection reset" in (second[3].data.reason or "")

    steps = [(e.type, e.step, e.actor.id) for e in third[2:]]
    assert steps == [
        ("MODEL_REQUEST", 1, "triage"), ("MODEL_RESPONSE", 1, "triage"),
        ("TOOL_CALL", 1, "triage"), ("TOOL_RESULT", 1, "triage"), ("STEP_END", 1, "triage"),
        ("MODEL_REQUEST", 2, "specialist"), ("MODEL_RESPONSE", 2, "specialist"),
        ("STEP_END", 2, "specialist"), ("run.succeeded", 2, "specialist"),
    ]  # fmt: skip
    moved = third[5].data
    assert (moved.call_id, moved.tool_name) == ("h-1", "handoff")
    assert moved.output == {"fromAgent": "triage", "toAgent": "specialist"}

    assert [(e.type, e.step) for e in fourth[2:]] == [
        ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1), ("TOOL_CALL", 1), ("TOOL_RESULT", 1),
        ("STEP_END", 1), ("MODEL_REQUEST", 2), ("MODEL_RESPONSE", 2), ("STEP_END", 2),
        ("run.succeeded", 2),
    ]  # fmt: skip
    assert fourth[4].data.call_id == "c-3"


def test_what_cannot_be_mapped_is_counted_and_never_raised(publisher: Publisher) -> None:
    from runtrail.adapters.openai_agents import RuntrailTracingProcessor

    processor = RuntrailTracingProcessor(publisher, registry=CollectorRegistry())
    processor.on_span_start(object())  # type: ignore[arg-type]
    processor.on_span_end(object())  # type: ignore[arg-type]  # no span_data, no trace_id
    processor.on_trace_end(None)  # type: ignore[arg-type]
    processor.force_flush()
    assert processor.drops == {"error": 2}  # the start of an unknown kind is not queued
    processor.shutdown()
    processor.on_span_end(object())  # type: ignore[arg-type]
    assert processor.drops == {"error": 2, "closed": 1}


def test_concurrent_runs_in_one_process_stay_apart(publisher: Publisher) -> None:
    from agents import Agent, RunConfig, Runner

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import ScriptedModel, add, call, say

    processor = openai_agents.install(publisher)

    async def many() -> list[Any]:
        agents = []
        for i in range(5):
            answers: list[Answer] = [[call("add", {"a": i, "b": i}, f"c-{i}")], [say(str(2 * i))]]
            agents.append(Agent(name=f"calc-{i}", model=ScriptedModel(answers), tools=[add]))
        return await asyncio.gather(
            *(Runner.run(a, "double", run_config=RunConfig(group_id=f"g-{i}"))
              for i, a in enumerate(agents))
        )  # fmt: skip

    results = asyncio.run(many())
    assert [r.final_output for r in results] == ["0", "2", "4", "6", "8"]
    processor.force_flush()
    runs = by_run(read_back(publisher, expect=5 * 11))
    assert len(runs) == 5 and processor.dropped == 0
    for events in runs:
        assert [e.sequence for e in events] == list(range(1, 12))
        (session,) = {e.session_id for e in events}
        i = int(session.removeprefix("g-"))
        assert {e.actor.id for e in events[2:]} == {f"calc-{i}"}
        result = next(e.data for e in events if e.type == "TOOL_RESULT")
        assert (result.call_id, result.output) == (f"c-{i}", 2 * i)
        assert events[-1].type == "run.succeeded"


def test_open_traces_are_bounded_and_what_is_forgotten_is_counted(publisher: Publisher) -> None:
    from agents import Agent, Runner
    from agents.tracing import set_trace_processors

    from runtrail.adapters.openai_agents import RuntrailTracingProcessor
    from tests.openai_agents_support import ScriptedModel, say

    registry = CollectorRegistry()
    processor = RuntrailTracingProcessor(publisher, registry=registry, max_open_traces=1)
    set_trace_processors([processor])

    async def two() -> list[Any]:
        agents = [Agent(name=f"a{i}", model=ScriptedModel([[say(f"r{i}")]])) for i in range(2)]
        return await asyncio.gather(*(Runner.run(a, "hi") for a in agents))

    assert [r.final_output for r in asyncio.run(two())] == ["r0", "r1"]  # the agent is fine
    processor.shutdown()
    evicted = processor.drops.get("evicted", 0)
    assert evicted >= 1 and set(processor.drops) == {"evicted"}
    counted = registry.get_sample_value(
        "runtrail_openai_agents_dropped_total", {"reason": "evicted"}
    )
    assert counted == evicted
