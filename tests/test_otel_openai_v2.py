"""``opentelemetry-instrumentation-openai-v2`` (2.4b0), unchanged, against ``otlp-ingest``.

In its default mode the instrumentation sends message content as OTel log records
(``gen_ai.user.message``, ``gen_ai.choice``, …) and only metadata on the span; in its span-only
mode (``gen_ai_latest_experimental``) the content is on the span. Either way, what runtrail
records must be what the agent did: each model call's messages, answer, tool calls and tokens,
the tool's arguments and result, in order, one run. The agent runs in its own process
(``tests/otel_openai_v2_agent.py``) with the real OTLP/HTTP exporters; the model is
``tests/fake_openai.py``, whose exchanges are the truth compared against.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail_tools.devstack.scrape import fetch
from tests.fake_openai import Exchange, FakeOpenAI
from tests.support import consume_all
from tests.test_otlp_ingest import CODEC, TOKEN, Running, receiver  # noqa: F401 (fixture)

pytestmark = [pytest.mark.kafka]
ROOT = Path(__file__).resolve().parent.parent

MODES = {
    # content in log records: the instrumentation's default
    "logs": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
    # content on the span, as the latest (experimental) conventions put it
    "span-only": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
    },
}


@pytest.fixture
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def run_agent(running: Running, fake: FakeOpenAI, mode: str, stream: bool) -> str:
    """The instrumented agent, in its own process; its trace ID."""
    endpoint = running.url.rsplit("/v1/", 1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(MODES[mode])
    command = [sys.executable, "-m", "tests.otel_openai_v2_agent", "--endpoint", endpoint]
    command += ["--token", TOKEN, "--base-url", fake.base_url] + (["--stream"] if stream else [])
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def events_of_run(kafka_bootstrap: str, topic: str, run_id: str) -> list[Any]:
    messages = consume_all(kafka_bootstrap, topic, expect=11, timeout=30)
    events = [CODEC.decode(m.value()).event for m in messages]
    return sorted((e for e in events if e.run_id == run_id), key=lambda e: e.sequence)


def data(event: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = event.data.model_dump(mode="json", by_alias=True)
    return dumped


def text_of(message: Any) -> str | None:
    """A recorded message's text: ``content``, or the text parts of the semconv form."""
    if not isinstance(message, dict):
        return None
    if isinstance(message.get("content"), str):
        return str(message["content"])
    parts = message.get("parts") or []
    texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    if not texts:
        responses = [p.get("response") for p in parts if p.get("type") == "tool_call_response"]
        return str(responses[0]) if responses else None
    return "".join(str(t) for t in texts)


def tool_call_ids(message: Any) -> list[str]:
    """The tool-call IDs of a recorded answer, in either form."""
    if not isinstance(message, dict):
        return []
    inner = message.get("message") if isinstance(message.get("message"), dict) else message
    calls = inner.get("tool_calls") or []
    ids = [str(c.get("id")) for c in calls if isinstance(c, dict)]
    parts = inner.get("parts") or []
    ids += [str(p.get("id")) for p in parts if isinstance(p, dict) and p.get("type") == "tool_call"]
    return ids


def mismatches(events: list[Any], exchanges: list[Exchange]) -> list[str]:
    """Every difference between what runtrail recorded and what the agent did."""
    out: list[str] = []
    requests = [data(e) for e in events if e.type == "MODEL_REQUEST"]
    responses = [data(e) for e in events if e.type == "MODEL_RESPONSE"]
    if not len(requests) == len(responses) == len(exchanges):
        return [f"{len(requests)} requests, {len(responses)} responses, {len(exchanges)} calls"]
    for n, (request, response, exchange) in enumerate(
        zip(requests, responses, exchanges, strict=True)
    ):
        sent = exchange.request["messages"]
        recorded = request["prompt"].get("messages") or []
        if [m.get("role") for m in recorded] != [m.get("role") for m in sent]:
            out.append(f"call {n}: roles {recorded} != {[m.get('role') for m in sent]}")
        for got, want in zip(recorded, sent, strict=False):
            if want.get("content") is not None and text_of(got) != want["content"]:
                out.append(f"call {n}: message {text_of(got)!r} != {want['content']!r}")
        if response.get("message") != exchange.message.get("content"):
            out.append(f"call {n}: answer {response.get('message')!r}")
        usage = response["raw"].get("usage")
        want_usage = {
            "input_tokens": exchange.usage["prompt_tokens"],
            "output_tokens": exchange.usage["completion_tokens"],
        }
        if usage != want_usage:
            out.append(f"call {n}: usage {usage} != {want_usage}")
        want_ids = [c["id"] for c in exchange.message.get("tool_calls") or []]
        got_ids = [i for m in response["raw"].get("outputMessages") or [] for i in tool_call_ids(m)]
        if got_ids != want_ids:
            out.append(f"call {n}: tool calls {got_ids} != {want_ids}")
    calls = [data(e) for e in events if e.type == "TOOL_CALL"]
    results = [data(e) for e in events if e.type == "TOOL_RESULT"]
    asked = [c for x in exchanges for c in x.message.get("tool_calls") or []]
    if [c["callId"] for c in calls] != [c["id"] for c in asked]:
        out.append(f"tool calls {[c['callId'] for c in calls]} != {[c['id'] for c in asked]}")
    for call, result, want in zip(calls, results, asked, strict=False):
        if call["arguments"] != json.loads(want["function"]["arguments"]):
            out.append(f"tool arguments {call['arguments']!r}")
        expected = json.dumps({"city": "Oslo", "temp_c": -3})
        if result.get("output") != expected:  # JSON-looking text stays text
            out.append(f"tool result {result.get('output')!r} != {expected!r}")
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_what_the_instrumentation_sent_is_what_the_agent_did(
    receiver: Running,  # noqa: F811 (the fixture)
    fake_model: FakeOpenAI,
    kafka_bootstrap: str,
    mode: str,
    stream: bool,
) -> None:
    run_id = run_agent(receiver, fake_model, mode, stream)
    assert receiver.receiver.publisher.flush(30) == 0
    events = events_of_run(kafka_bootstrap, receiver.topic, run_id)
    assert [e.type for e in events][:2] == ["run.accepted", "run.state_transitioned"]
    assert events[-1].type == "run.succeeded"
    assert len(fake_model.exchanges) == 2
    assert mismatches(events, fake_model.exchanges) == []
    steps = [(e.type, e.step) for e in events if e.type in ("MODEL_REQUEST", "TOOL_CALL")]
    assert steps == [("MODEL_REQUEST", 1), ("TOOL_CALL", 1), ("MODEL_REQUEST", 2)]
    scrape = fetch(receiver.metrics_url + "/metrics")
    assert scrape is not None
    assert not scrape.total("runtrail_otlp_ingest_log_records_total", outcome="dropped")
    assert not scrape.total("runtrail_otlp_ingest_spans_total", outcome="dropped")
    if mode == "logs":  # the content came as log records, and each was joined to its span
        assert scrape.total("runtrail_otlp_ingest_log_records_total", outcome="kept") >= 5
