"""OpenInference spans recorded as GenAI ones (``runtrail.adapters.otel_conventions.openinference``).

The table, on span views: span kinds, flattened messages, usage, parameters, tools, the TOOL
span's arguments and result (types kept), CHAIN as root or turn only. And the real thing: the
real ``openinference-instrumentation-openai`` over the real ``openai`` client (in a process of
its own: the instrumentor patches ``openai`` globally) talking to ``tests/fake_openai.py``,
exported by the real OTLP/HTTP protobuf exporter to the real receiver and broker; what lands
on the topic is compared with what the model server saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtrail.adapters.otel_conventions import as_genai
from runtrail.adapters.otel_conventions.openinference import claims
from runtrail.adapters.otel_mapping import Out, TraceMapper
from runtrail.adapters.otel_spans import SpanView
from runtrail_tools.devstack.scrape import fetch
from tests.test_otlp_ingest import (  # noqa: F401  (receiver: the fixture)
    EXPECTED_TYPES,
    TOKEN,
    Running,
    events_of,
    receiver,
)

TRACE = "5b8efff798038103d269b633813fc60c"
ROOT = Path(__file__).resolve().parents[1]


def oi(span_id: str, parent: str | None, kind: str | None, end: int, **attrs: Any) -> SpanView:
    attributes = {k.replace("__", "."): v for k, v in attrs.items()}
    if kind is not None:
        attributes["openinference.span.kind"] = kind
    return SpanView(TRACE, span_id, parent, span_id, end * 10, end * 10 + 5, attributes)


def of_type(events: list[Out], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event_type == kind]


LLM_ATTRS: dict[str, Any] = {
    "llm.model_name": "gpt-x",
    "llm.system": "openai",
    "llm.invocation_parameters": '{"model": "gpt-x", "temperature": 0.3, "stop": "END", "n": 2}',
    "llm.input_messages.0.message.role": "system",
    "llm.input_messages.0.message.content": "be brief",
    "llm.input_messages.1.message.role": "user",
    "llm.input_messages.1.message.content": '{"looks": "like json"}',
    "llm.input_messages.2.message.role": "assistant",
    "llm.input_messages.2.message.tool_calls.0.tool_call.id": "call-1",
    "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "weather",
    "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments": '{"city": "Oslo"}',
    "llm.input_messages.3.message.role": "tool",
    "llm.input_messages.3.message.tool_call_id": "call-1",
    "llm.input_messages.3.message.content": "[-3]",
    "llm.tools.0.tool.json_schema": '{"type": "function", "function": {"name": "weather"}}',
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.content": "It is -3.",
    "llm.finish_reason": "stop",
    "llm.token_count.prompt": 30,
    "llm.token_count.completion": 9,
    "output.value": '{"id": "resp-1", "model": "gpt-x-0613", "choices": []}',
    "output.mime_type": "application/json",
    "session.id": "s-1",
    "user.id": "u-1",
}


def test_an_llm_span_becomes_a_model_call_with_its_messages_usage_and_parameters() -> None:
    span = oi("c1", None, "LLM", 1, **LLM_ATTRS)
    genai = as_genai(span).attributes
    assert genai["gen_ai.operation.name"] == "chat"
    assert genai["gen_ai.conversation.id"] == "s-1" and genai["session.id"] == "s-1"
    assert genai["user.id"] == "u-1"
    mapped = TraceMapper().map([span])
    assert [e.event_type for e in mapped.events][2:] == [
        "MODEL_REQUEST",
        "MODEL_RESPONSE",
        "STEP_END",
        "run.succeeded",
    ]
    assert {e.session_id for e in mapped.events} == {"s-1"}
    prompt = of_type(mapped.events, "MODEL_REQUEST")[0]["prompt"]
    assert prompt == {
        "model": "gpt-x",
        "operation": "chat",
        "provider": "openai",
        "messages": [
            {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
            # text that looks like JSON stays text
            {"role": "user", "parts": [{"type": "text", "content": '{"looks": "like json"}'}]},
            {
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool_call",
                        "id": "call-1",
                        "name": "weather",
                        "arguments": {"city": "Oslo"},
                    }
                ],
            },
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": "call-1", "response": "[-3]"}],
            },
        ],
        # a string stop stays a string
        "params": {"temperature": 0.3, "stop_sequences": "END", "choice.count": 2},
        "tools": [{"type": "function", "function": {"name": "weather"}}],
        "metadata": {"user.id": "u-1"},
    }
    response = of_type(mapped.events, "MODEL_RESPONSE")[0]
    assert response["message"] == "It is -3."
    assert response["raw"] == {
        "model": "gpt-x-0613",
        "id": "resp-1",
        "finishReasons": ["stop"],
        "outputMessages": [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "It is -3."}],
                "finish_reason": "stop",
            }
        ],
        "usage": {"input_tokens": 30, "output_tokens": 9},
    }


def test_a_tool_span_keeps_its_arguments_and_result_types() -> None:
    json_in_text_out = oi(
        "t1",
        "a",
        "TOOL",
        1,
        tool__name="weather",
        tool__id="call-1",
        tool__parameters='{"type": "object"}',
        input__value='{"city": "Oslo"}',
        input__mime_type="application/json",
        output__value='{"temp_c": -3}',
        output__mime_type="text/plain",
    )
    text_in_json_out = oi(
        "t2",
        "a",
        "TOOL",
        2,
        tool__name="lookup",
        input__value="[Oslo]",
        input__mime_type="text/plain",
        output__value='{"temp_c": -3}',
        output__mime_type="application/json",
    )
    # no input.value: tool.parameters (JSON text) are the arguments
    parameters_only = oi("t3", "a", "TOOL", 3, tool__name="p", tool__parameters='{"q": 1}')
    agent = oi("a", None, "AGENT", 4)  # the turn they hang under (a tool waits for it)
    mapped = TraceMapper().map([json_in_text_out, text_in_json_out, parameters_only, agent])
    assert of_type(mapped.events, "TOOL_CALL") == [
        {"callId": "call-1", "toolName": "weather", "arguments": {"city": "Oslo"}},
        {"callId": "t2", "toolName": "lookup", "arguments": "[Oslo]"},
        {"callId": "t3", "toolName": "p", "arguments": {"q": 1}},
    ]
    assert [r.get("output") for r in of_type(mapped.events, "TOOL_RESULT")] == [
        '{"temp_c": -3}',
        {"temp_c": -3},
        None,
    ]


def test_a_chain_is_an_agent_as_root_or_turn_and_not_genai_elsewhere() -> None:
    mapper = TraceMapper()
    mapped = mapper.map(
        [
            oi("c1", "node", "LLM", 1, **{"llm.model_name": "m"}),
            oi("t1", "node", "TOOL", 2, **{"tool.name": "weather"}),
            oi("node", "root", "CHAIN", 3),  # the span the model and tool hang under: a turn
            oi("other", "root", "CHAIN", 4),  # a chain with no model or tool under it
            oi("root", None, "CHAIN", 5),  # the trace's root: the agent, it ends the run
        ]
    )
    assert mapped.dropped == {"not-genai": 1}
    assert [(e.event_type, e.turn_id) for e in mapped.events][-2:] == [
        ("STEP_END", "node"),
        ("run.succeeded", None),
    ]
    assert mapped.events[-1].data == {"resultRef": "otel-span:root"}
    # a chain that is neither root nor turn opens no run
    alone = TraceMapper().map([oi("x", "elsewhere", "CHAIN", 1)])
    assert alone.events == [] and alone.dropped == {"not-genai": 1}


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("EMBEDDING", "unmapped-operation:embeddings"),
        ("RETRIEVER", "unmapped-operation:retrieval"),
        ("RERANKER", "unmapped-operation:rerank"),
        ("GUARDRAIL", "unmapped-operation:guardrail"),
        ("EVALUATOR", "unmapped-operation:evaluate"),
        ("UNKNOWN", "not-genai"),
    ],
)
def test_kinds_without_a_runtime_event_are_counted_by_name(kind: str, reason: str) -> None:
    mapped = TraceMapper().map([oi("r1", "a", kind, 1, **{"input.value": "q"})])
    assert mapped.events == [] and mapped.dropped == {reason: 1}


def test_spans_already_in_genai_terms_are_read_as_they_are() -> None:
    both = oi(
        "c1",
        None,
        "LLM",
        1,
        **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "a", "llm.model_name": "b"},
    )
    assert not claims(both) and as_genai(both) is both
    plain = SpanView(TRACE, "h", None, "GET", 0, 1, {"http.method": "GET"})
    assert not claims(plain) and as_genai(plain) is plain
    # a GenAI attribute the span already has is kept over the table's
    partial = oi("c2", None, "LLM", 1, **{"gen_ai.request.model": "a", "llm.model_name": "b"})
    assert as_genai(partial).attributes["gen_ai.request.model"] == "a"
    assert "gen_ai.request.model" not in as_genai(partial).verbatim


# --- the real instrumentation, exporter, receiver and broker ----------------------------------
def semconv(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as GenAI semconv says it (the oracle, from the wire format)."""
    if message["role"] == "tool":
        part = {"type": "tool_call_response", "id": message["tool_call_id"]}
        return {"role": "tool", "parts": [{**part, "response": message["content"]}]}
    parts: list[dict[str, Any]] = []
    if message.get("content") is not None:
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or ():
        parts.append(
            {
                "type": "tool_call",
                "id": call["id"],
                "name": call["function"]["name"],
                "arguments": json.loads(call["function"]["arguments"]),
            }
        )
    return {"role": message["role"], "parts": parts}


def mismatches(events: list[Any], run: dict[str, Any]) -> list[str]:
    """Every difference between a run's events and the exchanges the model server kept."""
    out: list[str] = []

    def check(what: str, got: Any, want: Any) -> None:
        if got != want or type(got) is not type(want):
            out.append(f"{run['root']} {what}: recorded {got!r}, the agent did {want!r}")

    data = [e.data.model_dump(mode="json", by_alias=True) for e in events]
    check("types", [e.type for e in events], EXPECTED_TYPES)
    check("runs", {e.run_id for e in events}, {run["runId"]})
    check("sessions", {e.session_id for e in events}, {"s-1"})
    requests = [d for e, d in zip(events, data, strict=True) if e.type == "MODEL_REQUEST"]
    responses = [d for e, d in zip(events, data, strict=True) if e.type == "MODEL_RESPONSE"]
    steps = [e.step for e in events if e.type.startswith("MODEL_")]
    check("steps", steps, [1, 1, 2, 2])
    exchanges = run["exchanges"]
    check("model calls", len(requests), len(exchanges))
    for n, (request, response, exchange) in enumerate(
        zip(requests, responses, exchanges, strict=False), start=1
    ):
        sent, answer = exchange["request"], exchange["message"]
        prompt, raw = request["prompt"], response["raw"]
        check(f"call {n} messages", prompt["messages"], [semconv(m) for m in sent["messages"]])
        check(f"call {n} model", prompt["model"], sent["model"])
        check(f"call {n} tools", prompt["tools"], sent["tools"])
        check(f"call {n} temperature", prompt["params"]["temperature"], sent["temperature"])
        check(f"call {n} streamed", exchange["stream"], run["root"] == "AGENT")
        check(f"call {n} text", response["message"], answer["content"])
        check(f"call {n} output", raw["outputMessages"][0]["parts"], semconv(answer)["parts"])
        check(f"call {n} finish", raw["finishReasons"], [exchange["finish_reason"]])
        check(f"call {n} response id", raw["id"], exchange["response_id"])
        usage = exchange["usage"]
        tokens = {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
        }
        check(f"call {n} tokens", raw["usage"], tokens)
    calls = [d for e, d in zip(events, data, strict=True) if e.type == "TOOL_CALL"]
    results = [d for e, d in zip(events, data, strict=True) if e.type == "TOOL_RESULT"]
    asked = [c for x in exchanges for c in x["message"].get("tool_calls") or ()]
    answered = [m for m in exchanges[-1]["request"]["messages"] if m["role"] == "tool"]
    check("tool calls", len(calls), len(asked))
    for call, result, want, told in zip(calls, results, asked, answered, strict=False):
        check("tool call id", call["callId"], want["id"])
        check("tool name", call["toolName"], want["function"]["name"])
        check("tool arguments", call["arguments"], json.loads(want["function"]["arguments"]))
        check("tool result", result["output"], told["content"])  # text, as the tool gave it
        check("tool result id", result["callId"], told["tool_call_id"])
    return out


@pytest.mark.kafka
def test_the_real_openinference_instrumentation_lands_what_the_agent_did(
    receiver: Running,  # noqa: F811
    kafka_bootstrap: str,
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("OPENINFERENCE_ENABLE_GENAI_SEMCONV", None)  # the OpenInference attributes alone
    done = subprocess.run(
        [sys.executable, "-m", "tests.openinference_agent", receiver.url, TOKEN],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout.strip().splitlines()[-1])["runs"]
    assert [(r["root"], len(r["exchanges"])) for r in runs] == [("CHAIN", 2), ("AGENT", 2)]
    assert receiver.receiver.publisher.flush(30) == 0
    problems: list[str] = []
    for run in runs:
        events = events_of(kafka_bootstrap, receiver.topic, run["runId"], expect=22)
        problems += mismatches(events, run)
    assert problems == []
    # every span (2 roots, 4 LLM, 2 TOOL) recorded; none dropped as not-genai or otherwise
    scrape = fetch(receiver.metrics_url + "/metrics")
    assert scrape is not None
    assert scrape.total("runtrail_otlp_ingest_spans_total", outcome="recorded") == 8
    assert not scrape.total("runtrail_otlp_ingest_spans_total", outcome="dropped")
    assert scrape.total("runtrail_otlp_ingest_requests_total", outcome="ok") == 8
