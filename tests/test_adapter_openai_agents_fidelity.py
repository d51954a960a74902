"""What runtrail recorded of an OpenAI Agents SDK run equals what the agent did.

One agent with a function tool runs with ``Runner.run_sync`` twice, its events published to
the real broker and read back:

* with the SDK's own ``OpenAIChatCompletionsModel`` over the real ``openai`` client talking to
  the local OpenAI-compatible server: every model call (model, input, tokens, text, the tool
  calls it asked for), every tool call (the model's call ID, name, arguments, the result the
  model was told) and every step end equals the server's exchanges: zero mismatches;
* with a custom ``Model`` that returns the same answers and opens no span (the SDK opens
  Generation/Response spans only in its own models): the tools and steps are the same, the
  call ID is the Function span's ID (the documented fallback: the SDK shows the call's ID
  nowhere else), and every model call is counted ``model_untraced`` with its tokens.

A spanless model that fails, or is stopped by an input guardrail, ends the run as the SDK did;
without Turn spans its tools share one step and only that step's call can be counted.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import pytest

from runtrail.adapters.openai_agents_map import MODEL_UNTRACED, function_calls
from runtrail.publisher import Publisher
from tests.fake_openai import Exchange, FakeOpenAI
from tests.test_adapter_openai_agents import (  # noqa: F401  (fixtures)
    no_other_processors,
    publisher,
    read_back,
)

# The SDK (and the adapter and support module built on it) is imported by the tests that run
# it: a second of CPU that every test process would otherwise spend collecting this module.
if TYPE_CHECKING:
    from agents import ModelResponse

pytestmark = [pytest.mark.kafka]

Facts = dict[tuple[Any, ...], Any]


def conversation(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Messages as the facts both sides say alike: role, text, tool call IDs, answered ID."""
    return [(m.get("role"), m.get("content"), tuple(c["id"] for c in m.get("tool_calls") or ()),
             m.get("tool_call_id")) for m in messages]  # fmt: skip


def did(exchanges: list[Exchange]) -> Facts:
    """What the agent did, from the server's side: each model call opens a step."""
    told = {m["tool_call_id"]: m["content"] for e in exchanges
            for m in e.request["messages"] if m.get("role") == "tool"}  # fmt: skip
    facts: Facts = {}
    for step, exchange in enumerate(exchanges, 1):
        calls = exchange.message.get("tool_calls") or []
        facts["model", step] = {
            "model": exchange.request["model"],
            "input": conversation(exchange.request["messages"]),
            "tokens": (exchange.usage["prompt_tokens"], exchange.usage["completion_tokens"]),
            "text": exchange.message.get("content"),
            "calls": [c["id"] for c in calls],
        }
        for n, c in enumerate(calls):
            facts["tool", step, n] = {
                "callId": c["id"], "name": c["function"]["name"],
                "arguments": json.loads(c["function"]["arguments"]), "result": told.get(c["id"]),
            }  # fmt: skip
        facts["step_end", step] = "tool_use" if calls else "final_answer"
    return facts


def recorded(events: list[Any]) -> Facts:
    """What runtrail recorded, from the events read back from the topic."""
    facts: Facts = {}
    prompts: dict[int, Any] = {}
    calls: dict[str, Any] = {}
    tools_in: dict[int, int] = {}
    for e in events:
        data = e.data
        if e.type == "MODEL_REQUEST":
            prompts[e.step] = data.prompt
        elif e.type == "MODEL_RESPONSE":
            prompt, usage = prompts[e.step], data.raw["usage"]
            facts["model", e.step] = {
                "model": prompt["model"],
                "input": conversation(prompt["input"]),
                "tokens": (usage["input_tokens"], usage["output_tokens"]),
                "text": data.message,
                "calls": [call_id for _, _, call_id in function_calls(data.raw["output"])],
            }
        elif e.type == "TOOL_CALL":
            calls[data.call_id] = (e.step, data.tool_name, data.arguments)
        elif e.type == "TOOL_RESULT":
            step, name, arguments = calls.pop(data.call_id)
            assert (step, name) == (e.step, data.tool_name)
            n = tools_in[e.step] = tools_in.get(e.step, -1) + 1
            facts["tool", e.step, n] = {"callId": data.call_id, "name": name,
                                        "arguments": arguments, "result": data.output}  # fmt: skip
        elif e.type == "STEP_END":
            facts["step_end", e.step] = data.reason
    assert calls == {}, f"tool calls without a result: {calls}"
    return facts


def mismatches(expected: Facts, got: Facts) -> list[str]:
    return [f"{key}: did {expected.get(key)!r}, recorded {got.get(key)!r}"
            for key in sorted(expected.keys() | got.keys(), key=str)
            if expected.get(key) != got.get(key)]  # fmt: skip


def as_sdk_answers(exchanges: list[Exchange]) -> list[ModelResponse | BaseException]:
    """The server's answers as a custom model returns them: output items and usage."""
    from agents import ModelResponse, Usage

    from tests.openai_agents_support import call, say

    answers: list[ModelResponse | BaseException] = []
    for i, exchange in enumerate(exchanges):
        message, usage = exchange.message, exchange.usage
        items: list[Any] = [call(c["function"]["name"], json.loads(c["function"]["arguments"]),
                                 c["id"]) for c in message.get("tool_calls") or ()]  # fmt: skip
        if message.get("content"):
            items.append(say(message["content"], f"msg-{i}"))
        fed, made = usage["prompt_tokens"], usage["completion_tokens"]
        spent = Usage(requests=1, input_tokens=fed, output_tokens=made, total_tokens=fed + made)
        answers.append(ModelResponse(output=items, usage=spent, response_id=exchange.response_id))
    return answers


def test_sdk_model_and_custom_model_runs_are_recorded_as_the_agent_ran_them(
    publisher: Publisher,  # noqa: F811  (the fixture)
) -> None:
    from agents import OpenAIChatCompletionsModel, Runner
    from agents.tracing import add_trace_processor
    from openai import AsyncOpenAI

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import Seen, SpanlessModel, forecaster

    processor = openai_agents.install(publisher)
    seen = Seen()
    add_trace_processor(seen)
    # (a) the SDK's own Chat Completions model, over the real client, to the local server
    with FakeOpenAI() as fake:
        client = AsyncOpenAI(base_url=fake.base_url, api_key="not-needed")
        sdk_model = OpenAIChatCompletionsModel(model="fake-gpt", openai_client=client)
        result = Runner.run_sync(forecaster(sdk_model), "Weather in Oslo?")
    assert result.final_output == "The tool said: sunny in Oslo"
    exchanges = fake.exchanges
    assert len(exchanges) == 2  # a tool call, then the answer
    # (b) a custom model giving the same answers, tracing nothing
    custom = SpanlessModel(as_sdk_answers(exchanges))
    assert (
        Runner.run_sync(forecaster(custom), "Weather in Oslo?").final_output == result.final_output
    )
    processor.force_flush()
    events = read_back(publisher, expect=processor.published)
    sdk_run, custom_run = by_run(events)

    assert mismatches(did(exchanges), recorded(sdk_run)) == []
    for kind in ("run.accepted", "run.state_transitioned", "run.succeeded"):
        assert [e.type for e in sdk_run].count(kind) == 1
    assert sdk_run[-1].step == 2

    # (b): no model event (no content to publish), each model call counted with its tokens
    expected = {key: fact for key, fact in did(exchanges).items() if key[0] != "model"}
    functions = [s.span_id for s in seen.spans
                 if s.trace_id == custom_run[0].turn_id and s.span_data.type == "function"]  # fmt: skip
    tool_keys = sorted(key for key in expected if key[0] == "tool")
    for key, span_id in zip(tool_keys, functions, strict=True):
        expected[key] = {**expected[key], "callId": span_id}  # the fallback: the span's ID
    assert mismatches(expected, recorded(custom_run)) == []
    assert not any(e.type.startswith("MODEL_") for e in custom_run)
    assert custom_run[-1].type == "run.succeeded" and custom_run[-1].step == 2
    assert processor.drops == {MODEL_UNTRACED: len(exchanges)}
    tokens = processor.untraced_tokens
    assert (tokens["input_tokens"], tokens["output_tokens"]) == (
        sum(e.usage["prompt_tokens"] for e in exchanges),
        sum(e.usage["completion_tokens"] for e in exchanges),
    )
    assert len(custom.inputs) == len(exchanges)


def test_a_failing_or_guarded_custom_model_ends_the_run_as_the_sdk_did(
    publisher: Publisher,  # noqa: F811  (the fixture)
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agents import (
        Agent,
        GuardrailFunctionOutput,
        InputGuardrailTripwireTriggered,
        RunConfig,
        Runner,
        input_guardrail,
    )

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import SpanlessModel, forecaster

    caplog.set_level(logging.WARNING, logger=openai_agents.__name__)
    processor = openai_agents.install(publisher)
    broken = SpanlessModel([RuntimeError("upstream 503")])
    with pytest.raises(RuntimeError, match="upstream 503"):
        Runner.run_sync(forecaster(broken), "Weather in Oslo?")

    @input_guardrail
    def never(ctx: Any, agent: Agent[Any], text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    guarded = Agent(name="guarded", model=SpanlessModel([]), input_guardrails=[never])
    with pytest.raises(InputGuardrailTripwireTriggered):
        Runner.run_sync(guarded, "hi")
    # without Turn spans a spanless model shows nothing: its tools share one step
    answers = as_sdk_answers([exchange("call_1"), exchange(None)])
    no_turns = RunConfig(tracing={"include_task_and_turn_spans": False})
    Runner.run_sync(forecaster(SpanlessModel(answers)), "Weather?", run_config=no_turns)
    processor.force_flush()
    failed, stopped, blind = by_run(read_back(publisher, expect=processor.published))
    assert [(e.type, e.step) for e in failed[2:]] == [("STEP_END", 1), ("run.failed", 1)]
    assert failed[2].data.reason == "error" and "upstream 503" in failed[3].data.reason
    assert [e.type for e in stopped[2:]] == ["run.failed"]  # the model was never asked
    assert [(e.type, e.step) for e in blind[2:]] == [
        ("TOOL_CALL", 1), ("TOOL_RESULT", 1), ("STEP_END", 1), ("run.succeeded", 1),
    ]  # fmt: skip
    # the failed call, and the one step seen without Turn spans (the answer's call is unseen)
    assert processor.drops == {MODEL_UNTRACED: 2}
    assert processor.untraced_tokens == {}  # no Turn span said any
    said = [r.getMessage() for r in caplog.records if MODEL_UNTRACED in r.getMessage()]
    assert len(said) == 1 and "generation_span" in said[0]  # once per reason, with the remedy


def exchange(call_id: str | None) -> Exchange:
    """A server answer written by hand: a call of ``weather``, else a text."""
    message: dict[str, Any] = {"role": "assistant", "content": "sunny"}
    if call_id is not None:
        arguments = json.dumps({"city": "Oslo"})
        fn = {"name": "weather", "arguments": arguments}
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": call_id, "type": "function", "function": fn}]}  # fmt: skip
    usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    return Exchange({}, message, "stop", usage, "r-1", stream=False)


def by_run(events: list[Any]) -> list[list[Any]]:
    runs: dict[str, list[Any]] = {}
    for e in events:
        runs.setdefault(e.run_id, []).append(e)
    return list(runs.values())
