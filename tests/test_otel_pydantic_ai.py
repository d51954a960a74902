"""pydantic-ai's own OpenTelemetry instrumentation, recorded by runtrail.

pydantic-ai (2.78, instrumentation formats 5 and 6) writes GenAI spans with the content as span
attributes, no log records: ``invoke_agent`` (the run, its local root), under it one ``chat``
span per model request and one ``execute_tool`` span per tool call, the tool hanging under the
agent span, not under the model call that asked for it. The real agent, with one function tool,
runs against ``tests/fake_openai.py``; what runtrail recorded (in process, one span per export
and in one batch; over OTLP/HTTP through the receiver and broker) is compared with what the
model server saw. A failed tool: pydantic-ai sets ERROR with no status message and records an
``exception`` event; the mapping says why from that event, and keeps the result the model was
told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtrail.adapters.otel import RuntrailSpanExporter
from runtrail.adapters.otel_mapping import TraceMapper, error_detail
from runtrail.adapters.otel_spans import SpanEvent, SpanView
from tests.fake_openai import FakeOpenAI
from tests.pydantic_ai_support import QUESTION, mismatches, weather_agent
from tests.test_adapter_otel import Recorder
from tests.test_otlp_ingest import TOKEN, Running, events_of, receiver  # noqa: F401 (fixture)

if TYPE_CHECKING:  # pydantic-ai is imported by the tests that run an agent, not at collection
    from pydantic_ai import Agent

TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def run(
    agent: Agent[None, str], exporter: SpanExporter, *, version: int = 5, each: bool = True
) -> str:
    """One agent run, its spans exported one by one (or in one batch at the end)."""
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider()
    processor = SimpleSpanProcessor(exporter) if each else BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    agent.instrument = InstrumentationSettings(tracer_provider=provider, version=version)  # type: ignore[arg-type]
    try:
        return str(agent.run_sync(QUESTION).output)
    finally:
        provider.shutdown()


def streamed(agent: Agent[None, str]) -> str:
    async def go() -> str:
        async with agent.run_stream(QUESTION) as result:
            return str(await result.get_output())

    return asyncio.run(go())


# --- the real agent, in process ----------------------------------------------------------------
@pytest.mark.parametrize("version", [5, 6])
@pytest.mark.parametrize("each", [True, False], ids=["span-by-span", "one-batch"])
def test_an_agent_run_with_a_tool_is_recorded_as_the_model_saw_it(
    fake: FakeOpenAI, version: int, each: bool
) -> None:
    recorder = Recorder()
    exporter = RuntrailSpanExporter(recorder)
    answer = run(weather_agent(fake), exporter, version=version, each=each)

    assert [len(e.message.get("tool_calls") or []) for e in fake.exchanges] == [1, 0]
    tool_role = "tool" if version >= 6 else "user"
    assert mismatches(recorder.forms, fake.exchanges, tool_role=tool_role) == []
    assert recorder.forms[-3]["data"]["message"] == answer
    assert exporter.stats.dropped == {} and exporter.stats.late == 0


def test_a_streamed_run_is_recorded_alike(fake: FakeOpenAI) -> None:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    recorder = Recorder()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RuntrailSpanExporter(recorder)))
    agent = weather_agent(fake)
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    answer = streamed(agent)
    provider.shutdown()

    assert all(e.stream for e in fake.exchanges)
    assert mismatches(recorder.forms, fake.exchanges) == []
    assert recorder.forms[-3]["data"]["message"] == answer


def test_a_tool_asking_for_a_retry_records_why_and_what_the_model_was_told(
    fake: FakeOpenAI,
) -> None:
    from pydantic_ai import ModelRetry

    def unknown(city: str) -> str:
        """The weather of a city."""
        raise ModelRetry("unknown city, try again")

    recorder = Recorder()
    run(weather_agent(fake, unknown), RuntrailSpanExporter(recorder))

    (result,) = [f["data"] for f in recorder.forms if f["type"] == "TOOL_RESULT"]
    assert result["error"] == "pydantic_ai.exceptions.ToolRetryError: unknown city, try again"
    assert result["output"] == "unknown city, try again"
    assert recorder.forms[-1]["type"] == "run.succeeded"


def test_a_tool_that_raises_fails_the_run_with_its_exception(fake: FakeOpenAI) -> None:
    def broken(city: str) -> str:
        """The weather of a city."""
        raise ValueError("no weather today")

    recorder = Recorder()
    with pytest.raises(ValueError, match="no weather today"):
        run(weather_agent(fake, broken), RuntrailSpanExporter(recorder))

    (result,) = [f["data"] for f in recorder.forms if f["type"] == "TOOL_RESULT"]
    error = "ValueError: no weather today"
    assert result == {"callId": "call_fake_1", "toolName": "weather", "error": error}
    assert recorder.forms[-1]["type"] == "run.failed"
    assert recorder.forms[-1]["data"]["reason"] == error


def test_pydantic_ai_writes_spans_only_with_the_content_as_attributes(fake: FakeOpenAI) -> None:
    memory = InMemorySpanExporter()
    run(weather_agent(fake), memory)
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert set(spans) == {"invoke_agent agent", "chat fake-gpt", "execute_tool weather"}
    tool, agent = spans["execute_tool weather"], spans["invoke_agent agent"]
    assert tool.parent is not None and tool.parent.span_id == agent.context.span_id
    assert {"gen_ai.input.messages", "gen_ai.output.messages"} <= set(
        spans["chat fake-gpt"].attributes or {}
    )


# --- over OTLP/HTTP: the real exporter, the receiver, the broker -------------------------------
@pytest.mark.kafka
def test_an_agent_run_sent_over_otlp_lands_on_the_topic_as_the_model_saw_it(
    receiver: Running,  # noqa: F811 (the fixture)
    kafka_bootstrap: str,
    fake: FakeOpenAI,
) -> None:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    exporter = OTLPSpanExporter(receiver.url, headers={"Authorization": f"Bearer {TOKEN}"})
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    agent = weather_agent(fake)
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    agent.run_sync(QUESTION)
    provider.shutdown()
    assert receiver.receiver.publisher.flush(30) == 0

    run_id = f"{memory.get_finished_spans()[0].context.trace_id:032x}"
    events = events_of(kafka_bootstrap, receiver.topic, run_id, expect=11)
    assert mismatches([form(e) for e in events], fake.exchanges) == []


def form(event: Any) -> dict[str, Any]:
    """An envelope read from the topic, as the form :func:`mismatches` reads."""
    return {
        "type": event.type,
        "runId": event.run_id,
        "turnId": event.turn_id,
        "step": event.step,
        "data": event.data.model_dump(mode="json", by_alias=True),
    }


# --- the rule, on span views ------------------------------------------------------------------
def span(span_id: str, parent: str | None, op: str, end: int, **kw: Any) -> SpanView:
    attrs = {"gen_ai.operation.name": op, **kw.pop("attrs", {})}
    return SpanView(TRACE, span_id, parent, op, end - 1, end, attrs, **kw)


EXCEPTION = SpanEvent("exception", {"exception.type": "KeyError", "exception.message": "'x'"})


def test_why_a_span_failed_is_its_status_message_else_its_exception_else_error_type() -> None:
    assert (
        error_detail(span("a", None, "chat", 1, status_message="boom", events=(EXCEPTION,)))
        == "boom"
    )
    assert error_detail(span("a", None, "chat", 1, events=(EXCEPTION,))) == "KeyError: 'x'"
    typed = span("a", None, "chat", 1, attrs={"error.type": "timeout"}, events=(EXCEPTION,))
    assert error_detail(typed) == "KeyError: 'x'"
    assert error_detail(span("a", None, "chat", 1, attrs={"error.type": "timeout"})) == "timeout"
    assert error_detail(span("a", None, "chat", 1)) is None


def test_a_failed_tool_keeps_the_result_the_model_was_told_and_the_run_says_why() -> None:
    tool_attrs = {"gen_ai.tool.call.id": "c-1", "gen_ai.tool.name": "t"}
    spans = [
        span("m1", "root", "chat", 10),
        span(
            "t1",
            "root",
            "execute_tool",
            20,
            error=True,
            events=(EXCEPTION,),
            attrs={**tool_attrs, "gen_ai.tool.call.result": "try again"},
        ),
        span("t2", "root", "execute_tool", 30, error=True, attrs=tool_attrs),
        span("root", None, "invoke_agent", 40, error=True, events=(EXCEPTION,)),
    ]
    events = TraceMapper().map(spans).events
    results = [e.data for e in events if e.event_type == "TOOL_RESULT"]
    assert results == [
        {"callId": "c-1", "toolName": "t", "error": "KeyError: 'x'", "output": "try again"},
        {"callId": "c-1", "toolName": "t", "error": "error"},
    ]
    assert events[-1].event_type == "run.failed"
    assert events[-1].data == {"reason": "KeyError: 'x'"}
