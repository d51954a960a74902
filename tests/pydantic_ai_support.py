"""A pydantic-ai agent with one function tool over ``tests/fake_openai.py``, and the comparison
of what runtrail recorded of its run with what the model server saw.

Why here: the pydantic-ai tests (the mapping, the receiver, the docs example) record the same
agent and must all hold runtrail to the same ground truth, :attr:`FakeOpenAI.exchanges`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tests.fake_openai import MODEL, Exchange, FakeOpenAI

if TYPE_CHECKING:
    from pydantic_ai import Agent

QUESTION = "Weather in Oslo?"
INSTRUCTIONS = "Be brief."


def sunny(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


def weather_agent(fake: FakeOpenAI, tool: Callable[[str], str] = sunny) -> Agent[None, str]:
    """The agent: OpenAI's chat model pointed at the fake server, ``tool`` as ``weather``.

    pydantic-ai is imported here, not at module level: the comparison (:func:`mismatches`) is
    shared with tests of other frameworks, and every test process collects them."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=fake.base_url, api_key="sk-fake")
    model = OpenAIChatModel(MODEL, provider=provider)
    agent: Agent[None, str] = Agent(model, instructions=INSTRUCTIONS)
    agent.tool_plain(name="weather")(tool)
    return agent


def mismatches(
    events: list[dict[str, Any]],
    exchanges: list[Exchange],
    *,
    tool_role: str = "user",
    response_id: bool = True,
) -> list[str]:
    """Every difference between the recorded run and the exchanges (empty: none).

    ``events``: the envelopes as forms (``type``, ``runId``, ``turnId``, ``step``, ``data``), in
    publication order. ``tool_role``: the role pydantic-ai gives a tool result's message (its
    instrumentation format 5 says ``user``, 6 says ``tool``). ``response_id``: whether the spans
    carry the model's response ID (Google ADK's do not)."""
    out: list[str] = []
    expected = ["run.accepted", "run.state_transitioned"]
    for exchange in exchanges:
        calls = exchange.message.get("tool_calls") or []
        expected += ["MODEL_REQUEST", "MODEL_RESPONSE", *["TOOL_CALL", "TOOL_RESULT"] * len(calls)]
        expected.append("STEP_END")
    expected.append("run.succeeded")
    types = [e["type"] for e in events]
    if types != expected:
        return [f"event types {types} != {expected}"]
    if len({e["runId"] for e in events}) != 1:
        out.append(f"not one run: {sorted({e['runId'] for e in events})}")
    if len({e["turnId"] for e in events if e["step"] is not None}) != 1:
        out.append("not one turn")
    steps = iter(_by_step(events))
    for number, exchange in enumerate(exchanges, start=1):
        step = next(steps)
        if {e["step"] for e in step} != {number}:
            out.append(f"exchange {number}: steps {[e['step'] for e in step]}")
        request, response, *tools, _end = step
        out += _request(number, request["data"]["prompt"], exchange.request, tool_role)
        out += _response(number, response["data"], exchange, response_id)
        results = _tool_results(exchanges[number]) if number < len(exchanges) else {}
        calls = exchange.message.get("tool_calls") or []
        pairs = list(zip(tools[::2], tools[1::2], strict=True))
        for call, (tool_call, tool_result) in zip(calls, pairs, strict=True):
            out += _tool(number, call, tool_call["data"], tool_result["data"], results)
    return out


def _by_step(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The events of each step, in order, each ending with its STEP_END."""
    steps: list[list[dict[str, Any]]] = [[]]
    for event in events[2:-1]:
        steps[-1].append(event)
        if event["type"] == "STEP_END":
            steps.append([])
    return steps[:-1]


def _request(
    number: int, prompt: dict[str, Any], sent: dict[str, Any], tool_role: str
) -> list[str]:
    out = []
    system = [m["content"] for m in sent["messages"] if m["role"] == "system"]
    recorded_system = [p["content"] for p in prompt.get("system") or []]
    if recorded_system != system:
        out.append(f"request {number}: system {recorded_system} != {system}")
    wanted = [_sent_part(m, tool_role) for m in sent["messages"] if m["role"] != "system"]
    recorded = [_recorded_part(m) for m in prompt["messages"]]
    if recorded != wanted:
        out.append(f"request {number}: messages {recorded} != {wanted}")
    if prompt.get("model") != sent["model"]:
        out.append(f"request {number}: model {prompt.get('model')} != {sent['model']}")
    tools = [t["name"] for t in prompt.get("tools") or []]
    if tools != [t["function"]["name"] for t in sent.get("tools") or []]:
        out.append(f"request {number}: tools {tools}")
    return out


def _sent_part(message: dict[str, Any], tool_role: str) -> tuple[Any, ...]:
    """One OpenAI message as (role, kind, fields...): what the model was sent."""
    if message["role"] == "tool":
        return (tool_role, "tool_call_response", message["tool_call_id"], message["content"])
    if message.get("tool_calls"):
        (call,) = message["tool_calls"]
        arguments = json.loads(call["function"]["arguments"])
        return ("assistant", "tool_call", call["id"], call["function"]["name"], arguments)
    return (message["role"], "text", message["content"])


def _recorded_part(message: dict[str, Any]) -> tuple[Any, ...]:
    """One recorded GenAI message (of one part) in the form of :func:`_sent_part`."""
    (part,) = message["parts"]
    role = message["role"]
    if part["type"] == "tool_call_response":
        return (role, part["type"], part["id"], part["result"])
    if part["type"] == "tool_call":
        return (role, part["type"], part["id"], part["name"], _json(part["arguments"]))
    return (role, part["type"], part["content"])


def _response(
    number: int, data: dict[str, Any], exchange: Exchange, response_id: bool
) -> list[str]:
    out = []
    if data["message"] != exchange.message.get("content"):
        out.append(f"response {number}: message {data['message']!r}")
    usage = {
        "input_tokens": exchange.usage["prompt_tokens"],
        "output_tokens": exchange.usage["completion_tokens"],
    }
    if data["raw"].get("usage") != usage:
        out.append(f"response {number}: usage {data['raw'].get('usage')} != {usage}")
    if response_id and data["raw"].get("id") != exchange.response_id:
        out.append(f"response {number}: id {data['raw'].get('id')} != {exchange.response_id}")
    calls = [
        (p["id"], p["name"], _json(p["arguments"]))
        for m in data["raw"].get("outputMessages") or []
        for p in m["parts"]
        if p["type"] == "tool_call"
    ]
    answered = [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in exchange.message.get("tool_calls") or []
    ]
    if calls != answered:
        out.append(f"response {number}: tool calls {calls} != {answered}")
    return out


def _tool_results(after: Exchange) -> dict[str, Any]:
    """The tool results the next request carried back to the model, by call ID."""
    return {
        m["tool_call_id"]: m["content"] for m in after.request["messages"] if m["role"] == "tool"
    }


def _tool(
    number: int,
    call: dict[str, Any],
    tool_call: dict[str, Any],
    tool_result: dict[str, Any],
    results: dict[str, Any],
) -> list[str]:
    wanted_call = {
        "callId": call["id"],
        "toolName": call["function"]["name"],
        "arguments": json.loads(call["function"]["arguments"]),
    }
    recorded_call = {k: tool_call.get(k) for k in wanted_call}
    out = []
    if recorded_call != wanted_call:
        out.append(f"step {number}: TOOL_CALL {recorded_call} != {wanted_call}")
    wanted_result = {"callId": call["id"], "output": results.get(call["id"]), "error": None}
    recorded_result = {k: tool_result.get(k) for k in wanted_result}
    if recorded_result != wanted_result:
        out.append(f"step {number}: TOOL_RESULT {recorded_result} != {wanted_result}")
    return out


def _json(value: Any) -> Any:
    """Tool-call arguments as the value they mean (pydantic-ai keeps the model's JSON text)."""
    return json.loads(value) if isinstance(value, str) else value
