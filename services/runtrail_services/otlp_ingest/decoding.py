"""OTLP/HTTP trace and log bodies → span and log views: protobuf or JSON, plain, gzip or deflate, size-bounded.

OTLP's JSON differs from protobuf's canonical JSON in one way that matters: trace and span IDs
are hex, not base64; they are turned into base64 before the protobuf JSON parser reads them.
Unknown fields are ignored, as the OTLP specification asks of receivers.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator
from typing import Any

import orjson
from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from runtrail.adapters.otel_logs import LogView, event_name
from runtrail.adapters.otel_spans import SpanEvent, SpanView

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


class BodyError(ValueError):
    """A body the receiver refuses; ``status`` is the HTTP answer (400, 413, 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def media_type(content_type: str | None) -> str:
    """The body's encoding, from ``Content-Type`` (parameters such as charset ignored)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind not in (PROTOBUF, JSON):
        raise BodyError(415, f"Content-Type {content_type!r}: expected {PROTOBUF} or {JSON}")
    return kind


def inflate(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body without its ``Content-Encoding``; never more than ``limit`` bytes of it. Every
    member of a gzip body is read (not the first alone), and one that ends before its trailer
    (the checksum that says the data is whole) is refused as truncated."""
    coding = (encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding not in ("gzip", "deflate"):
        raise BodyError(415, f"Content-Encoding {encoding!r}: expected gzip, deflate or none")
    out = bytearray()
    rest = body
    try:
        while True:  # a gzip body may be several members, one after another (RFC 1952 2.2)
            inflater = zlib.decompressobj(wbits=47)  # gzip or zlib, detected from the header
            out += inflater.decompress(rest, limit + 1 - len(out))
            if len(out) > limit or inflater.unconsumed_tail:
                raise BodyError(413, f"the body inflates past {limit} bytes")
            if not inflater.eof:  # its end (and the checksum there) never came
                raise BodyError(400, f"the {coding} body is truncated")
            rest = inflater.unused_data
            if not rest:
                return bytes(out)
    except zlib.error as exc:
        raise BodyError(400, f"the {coding} body does not inflate: {exc}") from exc


def parse_request(body: bytes, kind: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    _parse(
        body,
        kind,
        request,
        "resourceSpans",
        "scopeSpans",
        "spans",
        ("traceId", "spanId", "parentSpanId"),
    )
    return request


def parse_logs_request(body: bytes, kind: str) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    _parse(body, kind, request, "resourceLogs", "scopeLogs", "logRecords", ("traceId", "spanId"))
    return request


def _parse(
    body: bytes,
    kind: str,
    request: Any,
    resources: str,
    scopes: str,
    items: str,
    ids: tuple[str, ...],
) -> None:
    """Parse ``body`` into ``request``; in JSON, the hex IDs of ``items`` read as OTLP writes them."""
    name = type(request).__name__
    if kind == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise BodyError(400, f"not an {name}: {exc}") from exc
        return
    try:
        document = orjson.loads(body)
        if not isinstance(document, dict):
            raise BodyError(400, "the JSON body is not an object")
        for resource in _members(document, resources):
            for scope in _members(resource, scopes):
                for item in _members(scope, items):
                    for key in ids:
                        value = item.get(key)
                        if isinstance(value, str) and value:
                            item[key] = _hex_to_base64(value, key)
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (orjson.JSONDecodeError, json_format.ParseError) as exc:
        raise BodyError(400, f"not an OTLP JSON {name}: {exc}") from exc


def _members(parent: Any, key: str) -> Iterator[dict[str, Any]]:
    """The objects of the list ``parent[key]``; nothing where the document has another shape
    (a string, a number, an object): the protobuf parser then refuses it, naming the field."""
    found = parent.get(key) if isinstance(parent, dict) else None
    if isinstance(found, list):
        yield from (member for member in found if isinstance(member, dict))


def _hex_to_base64(value: str, key: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError as exc:
        raise BodyError(400, f"{key} {value[:40]!r} is not hex") from exc


def response_body(kind: str, rejected: int, message: str, *, logs: bool = False) -> bytes:
    """The Export(Trace|Logs)ServiceResponse, in the request's encoding; partial success when
    something was rejected."""
    response: Any = ExportLogsServiceResponse() if logs else ExportTraceServiceResponse()
    if rejected or message:
        if logs:
            response.partial_success.rejected_log_records = rejected
        else:
            response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if kind == PROTOBUF:
        return bytes(response.SerializeToString())
    return str(json_format.MessageToJson(response, indent=None)).encode()


#: the google.rpc.Code an HTTP refusal carries in its Status body
GRPC_CODES = {400: 3, 401: 16, 404: 5, 411: 3, 413: 8, 415: 3, 500: 13, 503: 14}


def status_body(kind: str, http_status: int, message: str) -> bytes:
    """A ``google.rpc.Status`` in the request's encoding, as OTLP/HTTP asks of every 4xx/5xx
    answer (written out by hand: two fields, and no dependency on googleapis-common-protos)."""
    code = GRPC_CODES.get(http_status, 2)  # 2: UNKNOWN
    if kind != PROTOBUF:
        return orjson.dumps({"code": code, "message": message})
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def spans_of(request: ExportTraceServiceRequest) -> Iterator[SpanView]:
    for resource in request.resource_spans:
        shared = attributes(resource.resource.attributes)
        for scope in resource.scope_spans:
            for span in scope.spans:
                yield span_view(span, shared)


def span_view(span: Span, resource: dict[str, Any] | None = None) -> SpanView:
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        raise BodyError(400, f"span {span.name!r}: traceId must be 16 bytes and spanId 8")
    flags = span.flags
    return SpanView(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex() or None,
        name=span.name,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano or span.start_time_unix_nano,
        attributes=attributes(span.attributes),
        events=tuple(SpanEvent(e.name, attributes(e.attributes)) for e in span.events),
        error=span.status.code == Status.STATUS_CODE_ERROR,
        status_message=span.status.message or None,
        parent_remote=bool(flags & _HAS_IS_REMOTE and flags & _IS_REMOTE),
        resource=resource if resource is not None else {},
    )


def logs_of(request: ExportLogsServiceRequest) -> Iterator[LogView]:
    for resource in request.resource_logs:
        for scope in resource.scope_logs:
            for record in scope.log_records:
                attrs = attributes(record.attributes)
                yield LogView(
                    trace_id=record.trace_id.hex(),
                    span_id=record.span_id.hex(),
                    event_name=event_name(record.event_name, attrs),
                    attributes=attrs,
                    body=any_value(record.body) if record.HasField("body") else None,
                )


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as the SDK holds attributes (arrays as tuples)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, which)
