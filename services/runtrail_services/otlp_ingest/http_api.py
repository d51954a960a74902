"""``POST /v1/traces`` and ``POST /v1/logs``: the OTLP/HTTP endpoints, per tenant by bearer token.

Answers as the OTLP specification asks, every body in the request's encoding (a refusal's body
is a ``google.rpc.Status``): 200 with an ``ExportTraceServiceResponse`` — with
``partial_success`` (``rejected_spans`` and why) when some spans were not recorded (spans
without ``gen_ai.*`` attributes, events the publisher refused); 400 for a body that does not
decode (not retryable), 401 without a valid token, 413 for a body over the limits, 415 for an
encoding other than protobuf/JSON (gzip/deflate/none), 503 while stopping (retryable). Spans
are recorded only after the whole body decoded: a bad body records nothing.

Log records carry GenAI content for instrumentations in their default mode: each waits for its
span (:class:`~runtrail.adapters.otel_logs.LogJoin`) and is recorded with it; the ones that
cannot be (not a GenAI event, no span context, arrived after their span) are in the answer's
``partial_success`` (``rejected_log_records`` and why).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Protocol

from runtrail.adapters.otel_logs import LogView
from runtrail.adapters.otel_publish import PublishOutcome, Submitter, publish_mapped
from runtrail.adapters.otel_spans import SpanView
from runtrail.drops.tally import DropTally
from runtrail.http_server import BackgroundServer, KeepAliveHandler, TokenAuth, send_body
from runtrail.whole_numbers import whole_number
from runtrail_services.otlp_ingest.decoding import (
    JSON,
    PROTOBUF,
    BodyError,
    inflate,
    logs_of,
    media_type,
    parse_logs_request,
    parse_request,
    response_body,
    spans_of,
    status_body,
)
from runtrail_services.otlp_ingest.drop_records import ReceiverDrops
from runtrail_services.otlp_ingest.metrics import IngestMetrics
from runtrail_services.otlp_ingest.tenant_mappers import TenantMappers

log = logging.getLogger(__name__)

TRACES = "/v1/traces"
LOGS = "/v1/logs"


class SpanSink(Protocol):
    """Where decoded requests go: :class:`Ingest` (maps here) or
    :class:`~runtrail_services.otlp_ingest.forwarding.Forwarder` (to the raw topic)."""

    metrics: IngestMetrics
    accepting: bool

    def record(self, tenant: str, spans: list[SpanView]) -> PublishOutcome: ...

    def record_logs(self, tenant: str, logs: list[LogView]) -> Counter[str]: ...


class Ingest:
    """Decoded spans → events: one mapper per tenant, one lock (a run's events stay in order).
    What a request did not record goes to ``drops`` (the drops store) by run and reason."""

    def __init__(
        self,
        publisher: Submitter,
        metrics: IngestMetrics,
        *,
        max_traces: int = 10_000,
        session_resource_attribute: str | None = None,
        drops: ReceiverDrops | None = None,
    ) -> None:
        self.publisher = publisher
        self.metrics = metrics
        self.drops = drops
        self._tenants = TenantMappers(max_traces, session_resource_attribute)
        self._lock = threading.Lock()
        self.accepting = True

    def record_logs(self, tenant: str, logs: list[LogView]) -> Counter[str]:
        """Keep the GenAI log records for their spans; those that cannot be, by reason."""
        tally = DropTally()
        with self._lock:
            refused = self._tenants.join(tenant).add(logs, tally)
        if self.drops is not None:
            self.drops.record(tenant, tally)
        self.metrics.logs_taken("kept", len(logs), refused)
        return refused

    def record(self, tenant: str, spans: list[SpanView]) -> PublishOutcome:
        with self._lock:
            spans = self._tenants.join(tenant).attach(spans)
            mapper = self._tenants.mapper(tenant)
            evicted = mapper.evicted
            outcome = publish_mapped(self.publisher, mapper.map(spans), tenant=tenant)
            self.metrics.evicted.inc(mapper.evicted - evicted)
            self.metrics.open_traces.set(self._tenants.open_traces)
        self.metrics.mapped(len(spans), outcome)
        if self.drops is not None:
            self.drops.record(tenant, outcome.tally)
        return outcome


def _message(outcome: PublishOutcome) -> str:
    parts = [
        _reasons("not recorded (no runtime event)", outcome.dropped),
        _reasons("events refused by the publisher", outcome.rejected),
        _reasons("recorded incomplete", outcome.incomplete),
    ]
    return "; ".join(part for part in parts if part)


def _reasons(what: str, counts: Counter[str]) -> str:
    """``what: 2 reason-a, 1 reason-b`` (empty when nothing was counted)."""
    if not counts:
        return ""
    return f"{what}: " + ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))


def _handler(
    ingest: SpanSink, auth: TokenAuth, max_body: int, max_decoded: int
) -> type[BaseHTTPRequestHandler]:
    class Handler(KeepAliveHandler):
        log_prefix = "otlp-ingest http"

        def _send(self, status: int, ctype: str, body: bytes, *, close: bool = False) -> None:
            headers = {"Retry-After": "5"} if status == 503 else {}
            if close:
                headers["Connection"] = "close"
                self.close_connection = True
            send_body(self, status, ctype, body, realm="runtrail-otlp-ingest", headers=headers)

        def _error(self, status: int, outcome: str, message: str, *, close: bool = False) -> None:
            """A ``google.rpc.Status`` body, protobuf for a protobuf request, else JSON."""
            ingest.metrics.request(outcome)
            log.info("otlp-ingest: %d %s", status, message)
            asked = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            kind = PROTOBUF if asked == PROTOBUF else JSON
            self._send(status, kind, status_body(kind, status, message), close=close)

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in (TRACES, LOGS):
                self._drain_or_close()
                return self._error(
                    404, "bad_request", f"not found: only POST {TRACES} and POST {LOGS}"
                )
            try:
                self._export(logs=path == LOGS)
            except Exception:
                log.exception("otlp-ingest: request failed")
                self._error(500, "error", "internal error", close=True)

        def _drain_or_close(self) -> None:
            length = whole_number(self.headers.get("Content-Length"))
            if length is not None and length <= max_body:
                self.rfile.read(length)
            else:
                self.close_connection = True

        def _export(self, *, logs: bool) -> None:
            size = whole_number(self.headers.get("Content-Length"))
            if size is None:
                return self._error(411, "bad_request", "Content-Length is required", close=True)
            if size > max_body:
                return self._error(
                    413, "too_large", f"body of {size} bytes is over {max_body}", close=True
                )
            body = self.rfile.read(size)
            tenant = auth.tenant_of(self.headers.get("Authorization"))
            if tenant is None:
                return self._error(401, "unauthorized", "a valid bearer token is required")
            if not ingest.accepting:
                return self._error(503, "unavailable", "stopping; send again later")
            try:
                kind = media_type(self.headers.get("Content-Type"))
                raw = inflate(body, self.headers.get("Content-Encoding"), max_decoded)
                if logs:
                    records = list(logs_of(parse_logs_request(raw, kind)))
                else:
                    spans = list(spans_of(parse_request(raw, kind)))
            except BodyError as exc:
                outcome = {400: "bad_request", 413: "too_large", 415: "unsupported"}[exc.status]
                return self._error(exc.status, outcome, str(exc))
            if logs:
                refused = ingest.record_logs(tenant, records)
                ingest.metrics.request("partial" if refused else "ok")
                message = _reasons("log records not recorded", refused)
                body = response_body(kind, sum(refused.values()), message, logs=True)
                return self._send(200, kind, body)
            result = ingest.record(tenant, spans)
            rejected = min(len(spans), sum(result.dropped.values()) + result.rejected_spans)
            ingest.metrics.request("partial" if rejected else "ok")
            self._send(200, kind, response_body(kind, rejected, _message(result)))

    return Handler


class IngestServer(BackgroundServer):
    """The receiver on a daemon-threaded ThreadingHTTPServer (port 0 picks a free one)."""

    def __init__(
        self,
        host: str,
        port: int,
        ingest: SpanSink,
        auth: TokenAuth,
        *,
        max_body_bytes: int,
        max_decoded_bytes: int,
    ) -> None:
        handler = _handler(ingest, auth, max_body_bytes, max_decoded_bytes)
        super().__init__(host, port, handler, "otlp-ingest-http")
