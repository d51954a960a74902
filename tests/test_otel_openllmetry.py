"""OpenLLMetry (traceloop) spans recorded as what the agent did.

The table (:mod:`runtrail.adapters.otel_conventions.openllmetry`) on span views, as the
instrumentation's releases write them; then the real thing: traceloop's ``OpenAIInstrumentor``
over the real ``openai`` client and :mod:`tests.fake_openai`, the real OTLP/HTTP exporter, the
real receiver and broker, compared with what the server saw (:attr:`FakeOpenAI.exchanges`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtrail.adapters.otel_conventions import as_genai
from runtrail.adapters.otel_conventions.openllmetry import TABLE, claims
from runtrail.adapters.otel_mapping import TraceMapper
from runtrail.adapters.otel_spans import SpanView
from tests.test_otlp_ingest import EXPECTED_TYPES, TOKEN, Running, events_of, receiver

__all__ = ["receiver"]  # the receiver fixture, as test_otlp_ingest runs it

TRACE = "5b8efff798038103d269b633813fc60c"
ADAPTERS = Path(__file__).resolve().parents[1] / "docs" / "ADAPTERS.md"


def span(span_id: str, attrs: dict[str, Any], parent: str | None = None, end: int = 2) -> SpanView:
    return SpanView(TRACE, span_id, parent, f"span-{span_id}", 1, end, attrs)


# A chat span as the releases before the GenAI messages attributes wrote it (``_set_prompts``,
# ``_set_completions``, ``_set_response_attributes``): flattened, indexed, arguments as JSON text.
LEGACY_CHAT = {
    "llm.request.type": "chat",
    "gen_ai.system": "OpenAI",
    "gen_ai.request.model": "gpt-4o",
    "llm.is_streaming": False,
    "llm.request.functions.0.name": "weather",
    "llm.request.functions.0.description": "The weather in a city.",
    "llm.request.functions.0.parameters": '{"type": "object"}',
    "gen_ai.prompt.0.role": "system",
    "gen_ai.prompt.0.content": "Be brief.",
    "gen_ai.prompt.1.role": "user",
    "gen_ai.prompt.1.content": '{"looks": "like JSON"}',
    "gen_ai.prompt.2.role": "assistant",
    "gen_ai.prompt.2.tool_calls.0.id": "call_1",
    "gen_ai.prompt.2.tool_calls.0.name": "weather",
    "gen_ai.prompt.2.tool_calls.0.arguments": '{"city": "Oslo"}',
    "gen_ai.prompt.3.role": "tool",
    "gen_ai.prompt.3.tool_call_id": "call_1",
    "gen_ai.prompt.3.content": '{"temp_c": -3}',
    "gen_ai.response.model": "gpt-4o-2024",
    "gen_ai.response.id": "chatcmpl-1",
    "llm.usage.total_tokens": 40,
    "gen_ai.usage.prompt_tokens": 30,
    "gen_ai.usage.completion_tokens": 10,
    "gen_ai.completion.0.finish_reason": "tool_calls",
    "gen_ai.completion.0.role": "assistant",
    "gen_ai.completion.0.content": "Checking.",
    "gen_ai.completion.0.tool_calls.0.id": "call_2",
    "gen_ai.completion.0.tool_calls.0.name": "weather",
    "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Bergen"}',
    "gen_ai.completion.0.tool_calls.1.id": "call_3",
    "gen_ai.completion.0.tool_calls.1.name": "weather",
    "gen_ai.completion.0.tool_calls.1.arguments": '{"city": "Troms',  # cut short: kept as text
}


def test_a_legacy_chat_span_is_read_as_the_genai_one() -> None:
    attrs = as_genai(span("a1", LEGACY_CHAT)).attributes
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.input.messages"] == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        # text that looks like JSON is text
        {"role": "user", "parts": [{"type": "text", "content": '{"looks": "like JSON"}'}]},
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_1",
                    "name": "weather",
                    "arguments": {"city": "Oslo"},
                }
            ],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call_1", "response": '{"temp_c": -3}'}],
        },
    ]
    assert attrs["gen_ai.output.messages"] == [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Checking."},
                {
                    "type": "tool_call",
                    "id": "call_2",
                    "name": "weather",
                    "arguments": {"city": "Bergen"},
                },
                {
                    "type": "tool_call",
                    "id": "call_3",
                    "name": "weather",
                    "arguments": '{"city": "Troms',
                },
            ],
            "finish_reason": "tool_calls",
        }
    ]
    assert attrs["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert attrs["gen_ai.usage.input_tokens"] == 30
    assert attrs["gen_ai.usage.output_tokens"] == 10
    assert attrs["gen_ai.tool.definitions"] == [
        {
            "type": "function",
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object"},
        }
    ]
    # the span's own attributes stay
    assert attrs["gen_ai.response.id"] == "chatcmpl-1" and attrs["llm.usage.total_tokens"] == 40


def test_older_forms_function_call_llm_usage_and_content_blocks() -> None:
    attrs = as_genai(
        span(
            "a2",
            {
                "llm.request.type": "chat",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": json.dumps(
                    [
                        {"type": "text", "text": "hi"},
                        {"type": "image_url", "image_url": {"url": "u"}},
                    ]
                ),
                "gen_ai.prompt.1.role": "user",
                "gen_ai.prompt.1.content": "[1, 2]",
                "llm.usage.prompt_tokens": 7,
                "llm.usage.completion_tokens": 3,
                "gen_ai.completion.0.finish_reason": "function_call",
                "gen_ai.completion.0.function_call.name": "weather",
                "gen_ai.completion.0.function_call.arguments": '{"city": "Oslo"}',
                "gen_ai.completion.1.finish_reason": "stop",
                "gen_ai.completion.1.content": "Sunny.",
            },
        )
    ).attributes
    assert attrs["gen_ai.input.messages"] == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "hi"},
                {"type": "image_url", "image_url": {"url": "u"}},
            ],
        },
        {"role": "user", "parts": [{"type": "text", "content": "[1, 2]"}]},
    ]
    assert attrs["gen_ai.output.messages"] == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "name": "weather", "arguments": {"city": "Oslo"}}],
            "finish_reason": "function_call",
        },
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Sunny."}],
            "finish_reason": "stop",
        },
    ]
    assert attrs["gen_ai.response.finish_reasons"] == ["function_call", "stop"]
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (7, 3)


@pytest.mark.parametrize(
    ("attrs", "claimed"),
    [
        ({"gen_ai.prompt.0.role": "user"}, True),
        ({"gen_ai.completion.0.content": "x"}, True),
        ({"llm.request.type": "chat"}, True),
        ({"traceloop.span.kind": "tool"}, True),
        # a release writing the current convention: read as it is
        ({"llm.request.type": "chat", "gen_ai.input.messages": "[]"}, False),
        ({"gen_ai.completion.0.content": "x", "gen_ai.output.messages": "[]"}, False),
        ({"llm.usage.total_tokens": 3}, False),
        ({"gen_ai.prompt": "a pre-1.27 GenAI event attribute"}, False),
        ({"traceloop.workflow.name": "w", "gen_ai.operation.name": "chat"}, False),
        ({"http.method": "GET"}, False),
    ],
)
def test_claims_only_openllmetry_spans_not_in_the_current_convention(
    attrs: dict[str, Any], claimed: bool
) -> None:
    view = span("b1", attrs)
    assert claims(view) is claimed
    if not claimed:
        assert as_genai(view) is view


def test_the_span_own_genai_attributes_win() -> None:
    attrs = as_genai(
        span(
            "c1",
            {
                "llm.request.type": "completion",
                "gen_ai.operation.name": "generate_content",
                "gen_ai.usage.input_tokens": 5,
                "gen_ai.usage.prompt_tokens": 9,
            },
        )
    ).attributes
    assert attrs["gen_ai.operation.name"] == "generate_content"
    assert attrs["gen_ai.usage.input_tokens"] == 5


def test_span_kinds_map_to_operations_and_nothing_is_dropped_silently() -> None:
    agent = span(
        "d0",
        {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "weather_agent",
            "traceloop.entity.input": '{"args": [], "kwargs": {"q": "?"}}',
        },
        end=9,
    )
    task = span("d1", {"traceloop.span.kind": "task", "traceloop.entity.name": "plan"}, "d0", 3)
    chat = span("d2", {"llm.request.type": "completion", "gen_ai.prompt.0.content": "hi"}, "d0", 4)
    tool = span(
        "d3",
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "weather",
            "traceloop.entity.input": '{"args": [], "kwargs": {"city": "Oslo", "days": 2}}',
            "traceloop.entity.output": '"-3 C"',
        },
        "d0",
        5,
    )
    positional = span(
        "d4",
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "add",
            "traceloop.entity.input": '{"args": [2, 3], "kwargs": {}}',
            "traceloop.entity.output": "5",
        },
        "d0",
        6,
    )
    embed = span("d5", {"llm.request.type": "embedding"}, "d0", 7)
    assert as_genai(agent).attributes["gen_ai.operation.name"] == "invoke_agent"
    assert as_genai(agent).attributes["gen_ai.agent.name"] == "weather_agent"
    assert "gen_ai.tool.call.arguments" not in as_genai(agent).attributes
    mapped = TraceMapper().map([agent, task, chat, tool, positional, embed])
    assert mapped.dropped == {"unmapped-operation:task": 1, "unmapped-operation:embedding": 1}
    by_type = {e.event_type: e.data for e in mapped.events if e.span_id in ("d2", "d3")}
    assert by_type["MODEL_REQUEST"]["prompt"]["operation"] == "text_completion"
    assert by_type["TOOL_CALL"]["toolName"] == "weather"
    assert by_type["TOOL_CALL"]["arguments"] == {"city": "Oslo", "days": 2}
    assert by_type["TOOL_RESULT"]["output"] == "-3 C"
    calls = [e.data for e in mapped.events if e.span_id == "d4"]
    assert calls[0]["arguments"] == {"args": [2, 3], "kwargs": {}}
    assert calls[1]["output"] == 5
    assert [e.event_type for e in mapped.events][-1] == "run.succeeded"


def test_a_legacy_run_maps_to_model_and_tool_events() -> None:
    agent = span("e0", {"traceloop.span.kind": "agent", "traceloop.entity.name": "bot"}, end=9)
    chat = span("e1", LEGACY_CHAT, "e0", 4)
    mapped = TraceMapper().map([agent, chat])
    response = next(e.data for e in mapped.events if e.event_type == "MODEL_RESPONSE")
    assert response["message"] == "Checking."
    assert response["raw"]["finishReasons"] == ["tool_calls"]
    assert response["raw"]["usage"] == {"input_tokens": 30, "output_tokens": 10}
    calls = [p for m in response["raw"]["outputMessages"] for p in m["parts"]]
    assert [(c.get("id"), c.get("arguments")) for c in calls if c["type"] == "tool_call"] == [
        ("call_2", {"city": "Bergen"}),
        ("call_3", '{"city": "Troms'),
    ]
    request = next(e.data for e in mapped.events if e.event_type == "MODEL_REQUEST")
    assert request["prompt"]["model"] == "gpt-4o" and request["prompt"]["provider"] == "OpenAI"
    assert (
        len(request["prompt"]["messages"]) == 4
        and request["prompt"]["tools"][0]["name"] == "weather"
    )
    assert mapped.dropped == {}


def test_the_docs_table_lists_every_row() -> None:
    text = ADAPTERS.read_text()
    section = text.split("### OpenLLMetry (traceloop)", 1)[1].split("\n### ", 1)[0]
    rows = {tuple(c.strip() for c in line.split("|")[1:3]) for line in section.splitlines()}
    for row in TABLE:
        source = f"`{row.source}`" + (f" ({row.kind})" if row.kind else "")
        assert (source, f"`{row.target}`") in rows, row


# --- the real instrumentation -----------------------------------------------------------------
#: the GenAI convention's finish reasons for OpenAI's (the instrumentation renames them)
FINISH = {"tool_calls": "tool_call", "function_call": "tool_call"}


def expected_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages in the GenAI ``parts`` form."""
    out = []
    for message in messages:
        role = message["role"]
        parts: list[dict[str, Any]] = []
        if role == "tool":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": message["tool_call_id"],
                    "response": message["content"],
                }
            )
        elif message.get("content") is not None:
            parts.append({"type": "text", "content": message["content"]})
        for call in message.get("tool_calls") or []:
            parts.append(
                {
                    "type": "tool_call",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": json.loads(call["function"]["arguments"]),
                }
            )
        out.append({"role": role, "parts": parts})
    return out


def tool_calls(message: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]


def recorded_calls(raw: dict[str, Any]) -> list[tuple[str, str, Any]]:
    parts = [p for m in raw.get("outputMessages") or [] for p in m["parts"]]
    return [(p["id"], p["name"], p["arguments"]) for p in parts if p["type"] == "tool_call"]


def mismatches(events: list[Any], exchanges: list[dict[str, Any]]) -> list[str]:
    """Every way the recorded run differs from what the server saw (empty: none)."""
    found: list[str] = []

    def check(what: str, got: Any, want: Any) -> None:
        if got != want:
            found.append(f"{what}: recorded {got!r}, the agent did {want!r}")

    check("event types", [e.type for e in events], EXPECTED_TYPES)
    data = [e.data.model_dump(mode="json", by_alias=True) for e in events]
    requests = [d for e, d in zip(events, data, strict=True) if e.type == "MODEL_REQUEST"]
    responses = [d for e, d in zip(events, data, strict=True) if e.type == "MODEL_RESPONSE"]
    check("model calls", len(responses), len(exchanges))
    for n, (request, response, exchange) in enumerate(
        zip(requests, responses, exchanges, strict=False)
    ):
        sent, answered = exchange["request"], exchange["message"]
        check(f"call {n} messages", request["prompt"]["messages"], expected_input(sent["messages"]))
        check(f"call {n} model", request["prompt"]["model"], sent["model"])
        check(
            f"call {n} tools",
            [t["name"] for t in request["prompt"].get("tools") or []],
            ["weather"],
        )
        raw = response["raw"]
        check(f"call {n} response id", raw.get("id"), exchange["response_id"])
        # a stream's role chunk carries content "": no text, as the whole message's None
        check(f"call {n} text", response["message"] or None, answered.get("content"))
        check(f"call {n} tool calls", recorded_calls(raw), tool_calls(answered))
        usage = exchange["usage"]
        check(
            f"call {n} tokens",
            raw.get("usage"),
            {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]},
        )
        reason = exchange["finish_reason"]
        check(f"call {n} finish reasons", raw.get("finishReasons"), [FINISH.get(reason, reason)])
    called = [d for e, d in zip(events, data, strict=True) if e.type == "TOOL_CALL"]
    results = [d for e, d in zip(events, data, strict=True) if e.type == "TOOL_RESULT"]
    asked = [c for x in exchanges for c in tool_calls(x["message"])]
    answers = [m for x in exchanges for m in x["request"]["messages"] if m["role"] == "tool"]
    check(
        "tools run",
        [(c["toolName"], c["arguments"]) for c in called],
        [(n, a) for _, n, a in asked],
    )
    check(
        "tool results",
        [r["output"] for r in results],
        [json.loads(m["content"]) for m in answers[: len(asked)]],
    )
    return found


@pytest.mark.kafka
def test_real_openllmetry_runs_are_recorded_as_the_agent_ran_them(
    receiver: Running, kafka_bootstrap: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.openllmetry_agent", receiver.url, TOKEN],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert receiver.receiver.publisher.flush(30) == 0
    runs, exchanges = report["runs"], report["exchanges"]
    assert [r["stream"] for r in runs] == [False, True]
    assert [x["stream"] for x in exchanges] == [False, False, True, True]
    everything = len(EXPECTED_TYPES) * len(runs)
    found: list[str] = []
    for n, run in enumerate(runs):
        events = events_of(kafka_bootstrap, receiver.topic, run["run_id"], expect=everything)
        found += [f"run {n}: {m}" for m in mismatches(events, exchanges[2 * n : 2 * n + 2])]
    assert not found, "\n".join(found)
