"""The in-process ``RuntrailSpanExporter``: a real SDK tracer, the real Publisher, the real broker.

Also the pure mapping rules (turns, steps, retries, spans without ``gen_ai.*``), checked on
span views, where no component is involved.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from runtrail.adapters.otel import RuntrailSpanExporter
from runtrail.adapters.otel_mapping import TraceMapper
from runtrail.adapters.otel_spans import SpanView
from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.publisher import Publisher
from tests.otel_support import SECRET, run_agent
from tests.support import consume_all, create_topic, unique_topic

CODEC = EventCodec()


def settings_for(bootstrap: str, tmp_path: Path, topic: str) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state",
    )


def read_events(bootstrap: str, topic: str, expect: int) -> list[Any]:
    messages = consume_all(bootstrap, topic, expect=expect, timeout=30)
    return [CODEC.decode(m.value()).event for m in messages]


@pytest.mark.kafka
def test_exporter_publishes_a_traced_agent_run_in_order(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runtrail.adapters.otel")
    topic = create_topic(kafka_bootstrap, unique_topic("otel"), partitions=1)
    publisher = Publisher(settings_for(kafka_bootstrap, tmp_path, topic))
    exporter = RuntrailSpanExporter(publisher)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        run_id = run_agent(provider)
        provider.force_flush()
        assert publisher.flush(30) == 0
    finally:
        provider.shutdown()
        publisher.close()
    events = read_events(kafka_bootstrap, topic, expect=exporter.stats.published)
    got = [(e.type, e.turn_id is not None, e.step) for e in events]
    assert got == [
        ("run.accepted", False, None),
        ("run.state_transitioned", False, None),
        ("MODEL_REQUEST", True, 1),
        ("MODEL_RESPONSE", True, 1),
        ("TOOL_CALL", True, 1),
        ("TOOL_RESULT", True, 1),
        ("STEP_END", True, 1),
        ("MODEL_REQUEST", True, 2),
        ("MODEL_RESPONSE", True, 2),
        ("STEP_END", True, 2),
        ("run.succeeded", False, None),
    ]
    assert {e.run_id for e in events} == {run_id}
    assert {e.session_id for e in events} == {"conv-1"}
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    # the HTTP span under the tool has no gen_ai.* attributes: counted, not published
    assert exporter.stats.dropped == {"not-genai": 1}
    assert "spans not recorded (not-genai)" in caplog.text
    assert exporter.stats.rejected == {} and exporter.failures == 0
    request = events[2].data.model_dump(mode="json", by_alias=True)
    assert request["prompt"]["model"] == "gpt-test"
    assert request["prompt"]["params"] == {"temperature": 0.2}
    response = events[3].data.model_dump(mode="json", by_alias=True)
    assert response["message"] == "Let me look."
    assert response["raw"]["usage"] == {"input_tokens": 12, "output_tokens": 7}
    call = events[4].data.model_dump(mode="json", by_alias=True)
    assert call["callId"] == "call-1" and call["toolName"] == "weather"
    assert call["arguments"]["city"] == "Oslo"
    # redacted with the publisher's redactor before it left the process
    assert SECRET not in str(call) and all(
        SECRET.encode() not in m for m in [str(e).encode() for e in events]
    )


@pytest.mark.kafka
def test_exporter_never_raises_and_counts_what_the_publisher_refuses(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A closed publisher refuses every event: export still answers SUCCESS, the refusals are
    counted by reason, and the SDK's app code never sees an exception."""
    topic = unique_topic("otel-closed")
    publisher = Publisher(settings_for(kafka_bootstrap, tmp_path, topic))
    publisher.close()
    exporter = RuntrailSpanExporter(publisher)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_agent(provider, fail=True)
    provider.shutdown()
    assert exporter.stats.published == 0
    assert exporter.stats.rejected == {"closed": 11}
    assert exporter.failures == 0


# --- the mapping, on span views ---------------------------------------------------------------
TRACE = uuid.uuid4().hex


def view(span_id: str, parent: str | None, op: str | None, end: int, **kw: Any) -> SpanView:
    attrs = {"gen_ai.operation.name": op} if op else {}
    attrs.update(kw.pop("attrs", {}))
    return SpanView(TRACE, span_id, parent, op or "other", end - 1, end, attrs, **kw)


def kinds(events: list[Any]) -> list[tuple[str, str | None, int | None]]:
    return [(e.event_type, e.turn_id, e.step) for e in events]


def test_failed_model_span_is_a_retry_of_its_step_and_the_next_one_continues_it() -> None:
    mapper = TraceMapper()
    spans = [
        view("c1", "agent", "chat", 10, error=True, status_message="rate limited"),
        view("c2", "agent", "chat", 20),
        view("agent", None, "invoke_agent", 30),
    ]
    mapped = mapper.map(reversed(spans))  # the order within a batch does not matter
    assert kinds(mapped.events) == [
        ("run.accepted", None, None),
        ("run.state_transitioned", None, None),
        ("MODEL_REQUEST", "agent", 1),
        ("MODEL_RETRY", "agent", 1),
        ("MODEL_REQUEST", "agent", 1),
        ("MODEL_RESPONSE", "agent", 1),
        ("STEP_END", "agent", 1),
        ("run.succeeded", None, None),
    ]
    assert mapped.events[3].data == {"attempt": 1, "reason": "rate limited"}
    assert mapper.open_traces == 0


def test_spans_across_batches_keep_steps_and_nested_agents_are_their_own_turns() -> None:
    mapper = TraceMapper()
    first = mapper.map([view("c1", "a1", "chat", 10), view("t1", "a1", "execute_tool", 11)])
    second = mapper.map(
        [
            view("c2", "a2", "chat", 12),  # a sub-agent's model call: its own turn
            view("a2", "a1", "invoke_agent", 13),
            view("c3", "a1", "chat", 14),
            view("a1", None, "invoke_agent", 15, error=True, status_message="boom"),
        ]
    )
    assert kinds(first.events)[2:] == [
        ("MODEL_REQUEST", "a1", 1),
        ("MODEL_RESPONSE", "a1", 1),
        ("TOOL_CALL", "a1", 1),
        ("TOOL_RESULT", "a1", 1),
    ]
    assert kinds(second.events) == [
        ("MODEL_REQUEST", "a2", 1),
        ("MODEL_RESPONSE", "a2", 1),
        ("STEP_END", "a2", 1),
        ("STEP_END", "a1", 1),
        ("MODEL_REQUEST", "a1", 2),
        ("MODEL_RESPONSE", "a1", 2),
        ("STEP_END", "a1", 2),
        ("run.failed", None, None),
    ]
    assert second.events[-1].data == {"reason": "boom"}


def test_spans_without_gen_ai_attributes_are_counted_and_dropped() -> None:
    mapper = TraceMapper()
    mapped = mapper.map(
        [
            view("h1", "x", None, 1),  # an HTTP span of a trace with nothing GenAI: dropped
            view("e1", "x", "embeddings", 2),  # a GenAI operation with no runtime event
            view("x", None, None, 3),  # its root: no run was opened, nothing to end
        ]
    )
    assert mapped.events == []
    assert mapped.dropped == {"not-genai": 2, "unmapped-operation:embeddings": 1}
    assert mapper.open_traces == 0


def test_a_non_genai_root_ends_the_run_its_genai_spans_opened() -> None:
    mapper = TraceMapper()
    mapped = mapper.map([view("c1", "http", "chat", 1), view("http", None, None, 2)])
    assert kinds(mapped.events)[-2:] == [("STEP_END", "http", 1), ("run.succeeded", None, None)]
    assert mapped.dropped == {}


def test_open_traces_are_bounded() -> None:
    mapper = TraceMapper(max_traces=2)
    for _ in range(3):
        mapper.map(
            [SpanView(uuid.uuid4().hex, "c", "a", "chat", 0, 1, {"gen_ai.operation.name": "chat"})]
        )
    assert mapper.open_traces == 2 and mapper.evicted == 1


@pytest.mark.kafka
def test_broker_down_the_agent_goes_on_and_the_spooled_run_arrives_later(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """With no broker, export returns at once (nothing waits on the network) and the run's
    events go to the publisher's spool; a publisher started later sends them, in order."""
    import socket
    import time

    from tests.support import wait_for

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    topic = create_topic(kafka_bootstrap, unique_topic("otel-down"), partitions=1)
    down = settings_for(dead, tmp_path, topic).model_copy(update={"delivery_timeout_ms": 1000})
    publisher = Publisher(down, retry_backoff_s=60)
    exporter = RuntrailSpanExporter(publisher)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    started = time.monotonic()
    run_id = run_agent(provider)
    assert time.monotonic() - started < 1.0  # the agent never waited for the broker
    assert exporter.stats.published == 11 and exporter.failures == 0
    wait_for(lambda: publisher.stats().spool_depth == 11, 20, what="the run spooled")
    publisher.close(timeout=1)
    provider.shutdown()

    later = Publisher(settings_for(kafka_bootstrap, tmp_path, topic))
    try:
        assert later.drain(30)
    finally:
        later.close()
    events = read_events(kafka_bootstrap, topic, expect=11)
    assert {e.run_id for e in events} == {run_id}
    assert [e.sequence for e in events] == list(range(1, 12))
    assert [e.type for e in events][-1] == "run.succeeded"


def test_a_span_ending_after_its_root_is_dropped_not_a_new_run() -> None:
    mapper = TraceMapper()
    mapper.map([view("c1", "a", "chat", 1), view("a", None, "invoke_agent", 2)])
    late = mapper.map([view("t1", "a", "execute_tool", 3)])
    assert late.events == [] and late.dropped == {"after-run-end": 1}
    assert mapper.open_traces == 0


def test_only_the_structured_attributes_are_parsed_every_other_text_stays_text() -> None:
    mapper = TraceMapper()
    tool = {
        "gen_ai.tool.call.arguments": '{"city": "Oslo"}',  # the semconv's JSON-serialized object
        "gen_ai.tool.call.result": '{"a": 1}',  # what the tool returned: text
    }
    mapped = mapper.map([view("t1", None, "execute_tool", 1, attrs=tool)])
    call, result = (e.data for e in mapped.events[2:4])
    assert call["arguments"] == {"city": "Oslo"}
    assert result["output"] == '{"a": 1}'


# --- order by start, grouping ------------------------------------------------------------------
NESTED_ORDER = [
    ("run.accepted", None),
    ("run.state_transitioned", None),
    ("MODEL_REQUEST", 1),
    ("MODEL_RESPONSE", 1),
    ("TOOL_CALL", 1),
    ("TOOL_RESULT", 1),
    ("STEP_END", 1),
    ("MODEL_REQUEST", 2),
    ("MODEL_RESPONSE", 2),
    ("STEP_END", 2),
    ("run.succeeded", None),
]


class Recorder:
    """A Submitter that keeps what it is given (the mapping and exporter, without a broker)."""

    def __init__(self) -> None:
        self.forms: list[dict[str, Any]] = []

    def submit(self, event: Any, *, trace_context: Any = None) -> Any:
        from types import SimpleNamespace

        self.forms.append(event)
        return SimpleNamespace(event_id=str(len(self.forms)), reason=None)

    def flush(self, timeout: float = 0) -> int:
        return 0

    def forget_run(self, run_id: str) -> None:
        pass


def nested_spans(**kw: Any) -> tuple[str, list[Any]]:
    """The nested (ADK-like) run's real SDK spans, in the order they ended."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.otel_support import run_nested_agent

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.instance.id": "inst-7"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run_id = run_nested_agent(provider, **kw)
    provider.shutdown()
    return run_id, list(memory.get_finished_spans())


@pytest.mark.parametrize("split", ["one-batch", "each-span-alone", "tool-and-model-first"])
def test_a_tool_span_inside_its_model_span_lands_in_that_step_however_it_is_batched(
    split: str,
) -> None:
    """ADK ends the model span after the tool span it produced: the model call still comes
    first, the tool in its step, whether the spans arrive together or one by one."""
    run_id, spans = nested_spans(**{"gen_ai.conversation.id": "conv-9"})
    assert [s.name for s in spans][:2] == ["execute_tool weather", "call_llm"]  # ended so
    batches = {
        "one-batch": [spans],
        "each-span-alone": [[s] for s in spans],
        "tool-and-model-first": [spans[:2], spans[2:]],
    }[split]
    recorder = Recorder()
    exporter = RuntrailSpanExporter(recorder)
    for batch in batches:
        exporter.export(batch)
    got = [(f["type"], f["step"]) for f in recorder.forms]
    assert got == NESTED_ORDER
    assert {f["runId"] for f in recorder.forms} == {run_id}
    assert {f["sessionId"] for f in recorder.forms} == {"conv-9"}
    request, call = recorder.forms[2], recorder.forms[4]
    assert call["turnId"] == request["turnId"]
    assert exporter.stats.late == 0 and exporter.stats.dropped == {}


def test_the_session_is_the_first_found_by_precedence_then_the_resource_then_the_run() -> None:
    _, spans = nested_spans(**{"session.id": "s-1", "langfuse.session.id": "lf-1"})
    recorder = Recorder()
    RuntrailSpanExporter(recorder).export(spans)
    assert {f["sessionId"] for f in recorder.forms} == {"s-1"}

    _, spans = nested_spans(**{"langfuse.session.id": "lf-1"})
    recorder = Recorder()
    RuntrailSpanExporter(recorder, session_resource_attribute="service.instance.id").export(spans)
    assert {f["sessionId"] for f in recorder.forms} == {"lf-1"}

    _, spans = nested_spans()
    recorder = Recorder()
    RuntrailSpanExporter(recorder, session_resource_attribute="service.instance.id").export(spans)
    assert {f["sessionId"] for f in recorder.forms} == {"inst-7"}

    run_id, spans = nested_spans()
    recorder = Recorder()
    RuntrailSpanExporter(recorder).export(spans)  # no resource attribute configured
    assert {f["sessionId"] for f in recorder.forms} == {run_id}


def test_gen_ai_conversation_id_wins_even_on_a_later_span() -> None:
    mapper = TraceMapper()
    mapped = mapper.map(
        [
            view("c1", "a", "chat", 1, attrs={"session.id": "s-1"}),
            view("c2", "a", "chat", 2, attrs={"gen_ai.conversation.id": "conv-2"}),
        ]
    )
    assert {e.session_id for e in mapped.events} == {"conv-2"}


def test_the_user_goes_with_the_first_model_request_only() -> None:
    mapper = TraceMapper()
    resource = {"enduser.id": "from-resource"}
    mapped = mapper.map(
        [
            view("c1", "a", "chat", 1, resource=resource),
            view("c2", "a", "chat", 2, attrs={"user.id": "u-1"}, resource=resource),
        ]
    )
    requests = [e.data["prompt"] for e in mapped.events if e.event_type == "MODEL_REQUEST"]
    assert requests[0]["metadata"] == {"user.id": "u-1"}  # a span's before a resource's
    assert "metadata" not in requests[1]


def test_a_late_model_call_whose_step_is_taken_is_dropped_and_counted() -> None:
    """Two model calls of one turn overlap; the one started first ends (arrives) last. Its step
    number is taken by the other: it cannot be placed right, so it is counted, not placed."""
    mapper = TraceMapper()
    first = mapper.map(
        [SpanView(TRACE, "c2", "a", "chat", 5, 6, {"gen_ai.operation.name": "chat"})]
    )
    assert kinds(first.events)[2:] == [("MODEL_REQUEST", "a", 1), ("MODEL_RESPONSE", "a", 1)]
    late = mapper.map(
        [
            SpanView(TRACE, "c1", "a", "chat", 1, 9, {"gen_ai.operation.name": "chat"}),
            SpanView(
                TRACE, "t1", "c1", "execute_tool", 2, 3, {"gen_ai.operation.name": "execute_tool"}
            ),
        ]
    )
    assert late.events == [] and late.dropped == {"late-span": 2}  # the call and its tool


def test_a_late_tool_span_is_placed_in_the_step_it_started_in_and_counted() -> None:
    mapper = TraceMapper()
    tool = {"gen_ai.operation.name": "execute_tool"}
    mapper.map(
        [
            SpanView(TRACE, "c1", "a", "chat", 1, 2, {"gen_ai.operation.name": "chat"}),
            SpanView(TRACE, "c2", "a", "chat", 5, 6, {"gen_ai.operation.name": "chat"}),
        ]
    )
    late = mapper.map([SpanView(TRACE, "t1", "a", "execute_tool", 3, 8, tool)])
    assert kinds(late.events) == [("TOOL_CALL", "a", 1), ("TOOL_RESULT", "a", 1)]
    assert late.late == 1 and late.dropped == {}
    early = mapper.map([SpanView(TRACE, "t0", "a", "execute_tool", 0, 9, tool)])
    assert early.events == [] and early.dropped == {"late-span": 1}  # before step 1: no step


def test_a_tool_whose_parent_never_arrives_is_placed_when_the_run_ends() -> None:
    mapper = TraceMapper()
    waiting = mapper.map([view("t1", "lost", "execute_tool", 2)])
    assert waiting.events == [] and waiting.dropped == {}  # it waits; the run is not open yet
    done = mapper.map([view("a", None, "invoke_agent", 9)])
    assert kinds(done.events)[2:] == [
        ("TOOL_CALL", "lost", 1),
        ("TOOL_RESULT", "lost", 1),
        ("STEP_END", "lost", 1),
        ("run.succeeded", None, None),
    ]


def test_a_model_span_without_messages_is_recorded_and_counted_as_incomplete() -> None:
    chat = {"gen_ai.operation.name": "chat"}
    bare = TraceMapper().map([SpanView(TRACE, "c1", "a", "chat", 1, 2, chat)])
    assert kinds(bare.events)[2:] == [("MODEL_REQUEST", "a", 1), ("MODEL_RESPONSE", "a", 1)]
    assert bare.incomplete == {"model-without-content": 1} and bare.dropped == {}
    said = {**chat, "gen_ai.output.messages": '[{"role": "assistant", "parts": []}]'}
    full = TraceMapper().map([SpanView(TRACE, "c1", "a", "chat", 1, 2, said)])
    assert full.incomplete == {}
    failed = TraceMapper().map([SpanView(TRACE, "c1", "a", "chat", 1, 2, chat, error=True)])
    assert failed.incomplete == {}  # a failed call has no answer to lack
