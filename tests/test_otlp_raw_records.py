"""The raw OTLP topic's records: a span or log record read back is the view that was written
(values keep their types: a JSON-looking string stays a string, an OTLP array a tuple), one
record per trace, keyed by tenant and trace."""

from __future__ import annotations

from runtrail.adapters.otel_logs import LogView
from runtrail.adapters.otel_spans import SpanEvent, SpanView
from runtrail_services.otlp_ingest.raw_records import (
    H_KIND,
    H_RECORD_ID,
    H_TENANT,
    LOGS,
    SPANS,
    log_records,
    logs_of,
    span_records,
    spans_of,
)

TRACE_A, TRACE_B = "a" * 32, "b" * 32


def span(trace_id: str, span_id: str, **attributes: object) -> SpanView:
    return SpanView(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id="c" * 16,
        name="execute_tool weather",
        start_ns=1_700_000_000_000_000_001,
        end_ns=1_700_000_000_000_000_999,
        attributes=attributes,
        events=(SpanEvent("exception", {"exception.type": "ValueError", "n": 2}),),
        error=True,
        status_message="boom",
        parent_remote=True,
        resource={"service.name": "bot", "tags": ("x", "y")},
    )


def test_spans_are_one_record_per_trace_and_read_back_as_written() -> None:
    spans = [
        span(
            TRACE_A,
            "1" * 16,
            **{
                "gen_ai.tool.call.result": '{"temp_c": -3}',  # JSON-looking text stays text
                "gen_ai.response.finish_reasons": ("stop",),
                "nested": {"list": (1, 2.5, True, None)},
                "big": 2**62,
            },
        ),
        span(TRACE_B, "2" * 16, x=1),
        span(TRACE_A, "3" * 16, y="z"),
    ]
    records = span_records("acme", spans)
    assert [held for _, held in records] == [2, 1]
    (first, _), (second, _) = records
    assert first.key == f"acme/{TRACE_A}".encode() and second.key == f"acme/{TRACE_B}".encode()
    headers = dict(first.headers)
    assert headers[H_TENANT] == b"acme" and headers[H_KIND] == SPANS
    assert headers[H_RECORD_ID].decode() == first.event_id != second.event_id
    assert spans_of(first.value) == [spans[0], spans[2]]
    assert spans_of(second.value) == [spans[1]]


def test_log_records_read_back_as_written() -> None:
    logs = [
        LogView(
            TRACE_A, "1" * 16, "gen_ai.user.message", {"gen_ai.system": "openai"}, {"content": "hi"}
        ),
        LogView(TRACE_A, "1" * 16, "gen_ai.choice", {}, ("a", {"b": (1,)})),
        LogView(TRACE_B, "2" * 16, "gen_ai.choice", {"k": "[1]"}, "text"),
    ]
    records = log_records("acme", logs)
    assert [r.key for r in records] == [f"acme/{TRACE_A}".encode(), f"acme/{TRACE_B}".encode()]
    assert dict(records[0].headers)[H_KIND] == LOGS
    assert logs_of(records[0].value) == logs[:2]
    assert logs_of(records[1].value) == logs[2:]
