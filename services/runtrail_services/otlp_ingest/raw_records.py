"""The records on the raw OTLP topic: what a forwarding receiver writes and the mapper reads.

One record per trace per request: the spans (or log records) of one trace that one request
carried, keyed ``tenant/traceId`` so every record of a trace lands on one partition, in the
order the receivers wrote them. The mapper maps each record as the single-process receiver
maps a request's spans of one trace, so a trace split over several receivers is mapped as one
receiver would have mapped it.

The value is the decoded view (:class:`~runtrail.adapters.otel_spans.SpanView`,
:class:`~runtrail.adapters.otel_logs.LogView`) as JSON: decoding OTLP happens once, in the
receiver, and the mapper needs no protobuf. OTLP arrays are tuples in a view and lists in
JSON: :func:`spans_of` and :func:`logs_of` turn them back, so a value maps exactly as it would
have in the receiver. Headers: ``rt.tenant``, ``rt.kind`` (``spans`` or ``logs``) and
``rt.event_id`` (a random ID per record: the publisher looks for it on the topic before it
resends from its spool, and the mapper skips a record it already applied).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import orjson

from runtrail.adapters.otel_grouping import by_trace
from runtrail.adapters.otel_logs import LogView
from runtrail.adapters.otel_spans import SpanEvent, SpanView
from runtrail.publisher.envelope_defaults import new_event_id
from runtrail.publisher.spool_record import SpoolRecord

SPANS = b"spans"
LOGS = b"logs"
H_TENANT = "rt.tenant"
H_KIND = "rt.kind"
H_RECORD_ID = "rt.event_id"


def key_of(tenant: str, trace_id: str) -> bytes:
    """The record key: one trace of one tenant, one partition."""
    return f"{tenant}/{trace_id}".encode()


def _record(tenant: str, trace_id: str, kind: bytes, docs: list[dict[str, Any]]) -> SpoolRecord:
    record_id = new_event_id()
    return SpoolRecord(
        key=key_of(tenant, trace_id),
        value=orjson.dumps(docs),
        headers=(
            (H_TENANT, tenant.encode()),
            (H_KIND, kind),
            (H_RECORD_ID, record_id.encode()),
        ),
        event_id=record_id,
        timestamp_ms=time.time_ns() // 1_000_000,
    )


def span_records(tenant: str, spans: Iterable[SpanView]) -> list[tuple[SpoolRecord, int]]:
    """One record per trace of ``spans`` (a request's), its spans in the order they came;
    each with how many spans it holds."""
    return [
        (_record(tenant, trace_id, SPANS, [_span_doc(s) for s in trace_spans]), len(trace_spans))
        for trace_id, trace_spans in by_trace(spans).items()
    ]


def log_records(tenant: str, logs: Iterable[LogView]) -> list[SpoolRecord]:
    """One record per trace of ``logs`` (a request's, each with a span context)."""
    traces: dict[str, list[dict[str, Any]]] = {}
    for log in logs:
        traces.setdefault(log.trace_id, []).append(_log_doc(log))
    return [_record(tenant, trace_id, LOGS, docs) for trace_id, docs in traces.items()]


def _span_doc(span: SpanView) -> dict[str, Any]:
    return {
        "t": span.trace_id,
        "s": span.span_id,
        "p": span.parent_span_id,
        "n": span.name,
        "b": span.start_ns,
        "e": span.end_ns,
        "a": span.attributes,
        "v": [[event.name, event.attributes] for event in span.events],
        "x": span.error,
        "m": span.status_message,
        "r": span.parent_remote,
        "R": span.resource,
    }


def _log_doc(log: LogView) -> dict[str, Any]:
    return {
        "t": log.trace_id,
        "s": log.span_id,
        "n": log.event_name,
        "a": log.attributes,
        "b": log.body,
    }


def _restored(value: Any) -> Any:
    """A value as the view had it: JSON lists back to tuples (OTLP arrays), at any depth."""
    if isinstance(value, list):
        return tuple(_restored(v) for v in value)
    if isinstance(value, dict):
        return {k: _restored(v) for k, v in value.items()}
    return value


def _attributes(doc: Any) -> dict[str, Any]:
    return {k: _restored(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def spans_of(value: bytes) -> list[SpanView]:
    """The spans of a ``spans`` record."""
    return [
        SpanView(
            trace_id=doc["t"],
            span_id=doc["s"],
            parent_span_id=doc["p"],
            name=doc["n"],
            start_ns=doc["b"],
            end_ns=doc["e"],
            attributes=_attributes(doc["a"]),
            events=tuple(SpanEvent(name, _attributes(attrs)) for name, attrs in doc["v"]),
            error=doc["x"],
            status_message=doc["m"],
            parent_remote=doc["r"],
            resource=_attributes(doc["R"]),
        )
        for doc in orjson.loads(value)
    ]


def logs_of(value: bytes) -> list[LogView]:
    """The log records of a ``logs`` record."""
    return [
        LogView(
            trace_id=doc["t"],
            span_id=doc["s"],
            event_name=doc["n"],
            attributes=_attributes(doc["a"]),
            body=_restored(doc["b"]),
        )
        for doc in orjson.loads(value)
    ]
