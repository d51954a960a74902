"""``runtrail run otlp-ingest``: the real OTLP/HTTP exporters (protobuf and JSON) post a traced
agent run to the receiver, which publishes it to the real broker; and the receiver's answers
to what it refuses (auth, limits, encodings, bad bodies), in OTLP's terms.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.common.http import Compression as JsonCompression
from opentelemetry.exporter.otlp.json.http.trace_exporter import (
    OTLPSpanExporter as JsonSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail_services.otlp_ingest.service import OtlpIngestReceiver
from runtrail_tools.devstack.scrape import fetch
from tests.otel_support import SECRET, STEPS, run_agent
from tests.support import consume_all, create_topic, end_offsets, unique_topic, wait_for

pytestmark = [pytest.mark.kafka]
CODEC = EventCodec()
TOKEN = "token-acme-0123456789"
EXPECTED_TYPES = [
    "run.accepted",
    "run.state_transitioned",
    "MODEL_REQUEST",
    "MODEL_RESPONSE",
    "TOOL_CALL",
    "TOOL_RESULT",
    "STEP_END",
    "MODEL_REQUEST",
    "MODEL_RESPONSE",
    "STEP_END",
    "run.succeeded",
]


@dataclass
class Running:
    receiver: OtlpIngestReceiver
    topic: str
    url: str
    metrics_url: str


@pytest.fixture
def receiver(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Running]:
    topic = create_topic(kafka_bootstrap, unique_topic("otlp"), partitions=2)
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state",
    )
    options = {
        "http_port": "0",
        "tokens": json.dumps({"acme": TOKEN}),
        "max_body_bytes": str(256 * 1024),
        "max_decoded_bytes": str(1024 * 1024),
        "session_resource_attribute": "service.instance.id",
    }
    receiver = OtlpIngestReceiver(settings, options=options, metrics_port=0)
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    wait_for(lambda: receiver.health.ready, 60, what="receiver ready")
    try:
        yield Running(
            receiver,
            topic,
            f"http://127.0.0.1:{receiver.port}/v1/traces",
            f"http://127.0.0.1:{receiver.endpoint.port}",
        )
    finally:
        receiver.request_stop()
        thread.join(30)


def trace_through(exporter: SpanExporter, **kw: Any) -> tuple[str, list[SpanExportResult]]:
    """Run the agent with ``exporter`` behind a processor; its run ID and the export results."""
    results: list[SpanExportResult] = []

    class Recording(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            result = exporter.export(spans)
            results.append(result)
            return result

        def shutdown(self) -> None:
            exporter.shutdown()

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Recording()))
    run_id = run_agent(provider, **kw)
    provider.shutdown()
    return run_id, results


def events_of(kafka_bootstrap: str, topic: str, run_id: str, expect: int) -> list[Any]:
    messages = consume_all(kafka_bootstrap, topic, expect=expect, timeout=30)
    events = [CODEC.decode(m.value()).event for m in messages]
    return sorted((e for e in events if e.run_id == run_id), key=lambda e: e.sequence)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_real_otlp_exporter_posts_an_agent_run_that_lands_on_the_topic(
    receiver: Running, kafka_bootstrap: str, encoding: str
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    exporter: SpanExporter
    if encoding == "protobuf":
        exporter = OTLPSpanExporter(receiver.url, headers=headers, compression=Compression.Gzip)
    else:
        exporter = JsonSpanExporter(
            receiver.url, headers=headers, compression=JsonCompression.DEFLATE
        )
    run_id, results = trace_through(exporter)
    # every span was posted on its own (SimpleSpanProcessor); the receiver took every request
    assert results and all(r is SpanExportResult.SUCCESS for r in results)
    assert receiver.receiver.publisher.flush(30) == 0
    events = events_of(kafka_bootstrap, receiver.topic, run_id, expect=len(EXPECTED_TYPES))
    assert [e.type for e in events] == EXPECTED_TYPES
    assert {e.tenant_id for e in events} == {"acme"}
    assert {e.session_id for e in events} == {"conv-1"}
    response = events[3].data.model_dump(mode="json", by_alias=True)
    assert response["raw"]["usage"] == {"input_tokens": 12, "output_tokens": 7}
    assert response["message"] == "Let me look."
    call = events[4].data.model_dump(mode="json", by_alias=True)
    assert call["arguments"]["city"] == "Oslo" and SECRET not in json.dumps(call)
    # the tool returned text that reads as JSON: it stays that text (only the attributes the
    # semconv defines as structured, such as the arguments, are parsed)
    result = events[5].data.model_dump(mode="json", by_alias=True)
    assert result["output"] == json.dumps(STEPS[0]["tool"][3])
    assert isinstance(result["output"], str)
    scrape = fetch(receiver.metrics_url + "/metrics")
    assert scrape is not None
    assert scrape.total("runtrail_otlp_ingest_spans_total", outcome="recorded") == 4
    assert scrape.total("runtrail_otlp_ingest_spans_total", outcome="dropped") == 1
    assert scrape.total("runtrail_otlp_ingest_requests_total", outcome="partial") == 1


def test_nested_spans_posted_one_by_one_map_by_start_in_the_resource_session(
    receiver: Running, kafka_bootstrap: str
) -> None:
    """The ADK nesting (each tool span inside its model span, so it ends, and is posted,
    first), every span in a request of its own: the model call still comes before its tool
    call, in one step; with no session attribute on any span, the resource attribute the
    receiver is configured with names the session."""
    from opentelemetry.sdk.resources import Resource

    from tests.otel_support import run_nested_agent

    exporter = OTLPSpanExporter(receiver.url, headers={"Authorization": f"Bearer {TOKEN}"})
    provider = TracerProvider(resource=Resource.create({"service.instance.id": "inst-7"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_id = run_nested_agent(provider)
    provider.shutdown()
    assert receiver.receiver.publisher.flush(30) == 0
    events = events_of(kafka_bootstrap, receiver.topic, run_id, expect=len(EXPECTED_TYPES))
    assert [(e.type, e.step) for e in events][2:7] == [
        ("MODEL_REQUEST", 1),
        ("MODEL_RESPONSE", 1),
        ("TOOL_CALL", 1),
        ("TOOL_RESULT", 1),
        ("STEP_END", 1),
    ]
    assert [e.type for e in events] == EXPECTED_TYPES
    assert {e.session_id for e in events} == {"inst-7"}
    assert events[5].data.output == json.dumps(STEPS[0]["tool"][3])  # text stays text


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read(), dict(answer.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def otlp_json(spans: list[dict[str, Any]]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


def json_span(span_id: str, name: str, attrs: dict[str, str], parent: str = "") -> dict[str, Any]:
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000100000000",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


def test_partial_success_counts_the_spans_not_recorded(
    receiver: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runtrail_services.otlp_ingest")
    body = otlp_json(
        [
            json_span(
                "eee19b7ec3c1b174", "chat", {"gen_ai.operation.name": "chat"}, "aaa19b7ec3c1b174"
            ),
            json_span("ccc19b7ec3c1b174", "GET /", {"http.method": "GET"}, "aaa19b7ec3c1b174"),
            json_span(
                "ddd19b7ec3c1b174",
                "embed",
                {"gen_ai.operation.name": "embeddings"},
                "aaa19b7ec3c1b174",
            ),
        ]
    )
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    status, answer, headers = post(receiver.url, body, auth)
    assert status == 200 and headers["Content-Type"] == "application/json"
    partial = json.loads(answer)["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 2
    assert "1 not-genai" in partial["errorMessage"]
    assert "1 unmapped-operation:embeddings" in partial["errorMessage"]
    # the chat span is recorded (not rejected), but says what it lacks
    assert "recorded incomplete: 1 model-without-content" in partial["errorMessage"]
    # each reason is logged once, naming the metric that counts it; the same again is not
    assert post(receiver.url, body, auth)[0] == 200
    told = [r.getMessage() for r in caplog.records if "spans not recorded" in r.getMessage()]
    assert told == [
        "otlp-ingest: spans not recorded (runtrail_otlp_ingest_spans_total), first seen: "
        "not-genai, unmapped-operation:embeddings (counted from now on)"
    ]
    told = [r.getMessage() for r in caplog.records if "recorded incomplete" in r.getMessage()]
    assert told == [
        "otlp-ingest: spans recorded incomplete (runtrail_otlp_ingest_spans_total), first seen: "
        "model-without-content (counted from now on)"
    ]
    # protobuf in, protobuf out
    proto = ExportTraceServiceRequest()
    status, answer, headers = post(
        receiver.url,
        proto.SerializeToString(),
        {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-protobuf"},
    )
    assert status == 200 and headers["Content-Type"] == "application/x-protobuf"
    parsed = ExportTraceServiceResponse()
    parsed.ParseFromString(answer)
    assert parsed.partial_success.rejected_spans == 0


def test_refusals_answer_in_otlp_terms_and_record_nothing(
    receiver: Running, kafka_bootstrap: str
) -> None:
    good = otlp_json([json_span("eee19b7ec3c1b174", "chat", {"gen_ai.operation.name": "chat"})])
    ctype = {"Content-Type": "application/json"}
    auth = {"Authorization": f"Bearer {TOKEN}", **ctype}
    assert post(receiver.url, good, ctype)[0] == 401
    assert post(receiver.url, good, {"Authorization": "Bearer wrong", **ctype})[0] == 401
    assert post(receiver.url, good, {**auth, "Content-Type": "text/plain"})[0] == 415
    assert post(receiver.url, good, {**auth, "Content-Encoding": "br"})[0] == 415
    assert post(receiver.url, b"{not json", auth)[0] == 400
    assert (
        post(receiver.url, b"\xff\x00garbage", {**auth, "Content-Type": "application/x-protobuf"})[
            0
        ]
        == 400
    )
    # a good span beside a bad one: the whole body is refused, the good span not recorded
    other_trace = json_span("abc19b7ec3c1b174", "chat", {"gen_ai.operation.name": "chat"})
    other_trace["traceId"] = "6b8efff798038103d269b633813fc60c"
    bad_id = otlp_json([other_trace, json_span("zz", "chat", {"gen_ai.operation.name": "chat"})])
    status, answer, headers = post(receiver.url, bad_id, auth)
    # a refusal's body is a google.rpc.Status in the request's encoding
    assert status == 400 and headers["Content-Type"] == "application/json"
    refusal = json.loads(answer)
    assert refusal["code"] == 3 and "spanId" in refusal["message"]
    status, answer, headers = post(
        receiver.url, b"\xff\x00", {**auth, "Content-Type": "application/x-protobuf"}
    )
    assert status == 400 and headers["Content-Type"] == "application/x-protobuf"
    from google.rpc.status_pb2 import Status

    parsed = Status()
    parsed.ParseFromString(answer)
    assert parsed.code == 3 and "ExportTraceServiceRequest" in parsed.message
    # over the limit as sent, and a small gzip body that inflates past the decoded limit
    assert post(receiver.url, b" " * (300 * 1024), auth)[0] == 413
    bomb = gzip.compress(b" " * (2 * 1024 * 1024))
    assert len(bomb) < 256 * 1024
    status, answer, _ = post(receiver.url, bomb, {**auth, "Content-Encoding": "gzip"})
    assert status == 413 and "inflates past" in json.loads(answer)["message"]
    assert post(receiver.url.replace("/v1/traces", "/v1/metrics"), good, auth)[0] == 404
    # nothing above was recorded; the one good body still is (gzip accepted)
    status, _, _ = post(receiver.url, gzip.compress(good), {**auth, "Content-Encoding": "gzip"})
    assert status == 200
    assert receiver.receiver.publisher.flush(30) == 0
    events = [
        CODEC.decode(m.value()).event
        for m in consume_all(kafka_bootstrap, receiver.topic, expect=6, timeout=20)
    ]
    assert [e.type for e in sorted(events, key=lambda e: e.sequence)] == [
        "run.accepted",
        "run.state_transitioned",
        "MODEL_REQUEST",
        "MODEL_RESPONSE",
        "STEP_END",
        "run.succeeded",
    ]
    assert sum(end_offsets(kafka_bootstrap, receiver.topic, 2).values()) == 6
    scrape = fetch(receiver.metrics_url + "/metrics")
    assert scrape is not None
    assert scrape.total("runtrail_otlp_ingest_requests_total", outcome="unauthorized") == 2
    assert scrape.total("runtrail_otlp_ingest_requests_total", outcome="too_large") == 2
    assert scrape.total("runtrail_otlp_ingest_requests_total", outcome="unsupported") == 2


def test_a_mistyped_option_is_an_error_naming_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", "run", "otlp-ingest", "-o", "max_body=1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "RUNTRAIL_STATE_DIR": str(tmp_path)},
    )
    assert done.returncode == 2
    assert "unknown otlp-ingest option(s) max_body" in done.stderr


def test_broker_down_the_receiver_still_takes_spans_into_its_spool(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The spool is durable, so a span the broker cannot take now is accepted (200), not
    bounced back to the sender; a later start of the receiver sends it, in order."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    topic = create_topic(kafka_bootstrap, unique_topic("otlp-down"), partitions=1)
    down = Settings(
        bootstrap_servers=dead,
        events_topic=topic,
        spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state",
        delivery_timeout_ms=1000,
    )
    options = {"http_port": "0", "tokens": json.dumps({"acme": TOKEN})}
    receiver = OtlpIngestReceiver(down, options=options, metrics_port=0)
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    wait_for(lambda: receiver.health.ready, 60, what="receiver ready")
    try:
        exporter = OTLPSpanExporter(
            f"http://127.0.0.1:{receiver.port}/v1/traces",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        run_id, results = trace_through(exporter)
        assert results and all(r is SpanExportResult.SUCCESS for r in results)
        wait_for(lambda: receiver.publisher.stats().spool_depth == 11, 20, what="spooled")
    finally:
        receiver.request_stop()
        thread.join(30)
    from runtrail.publisher import Publisher

    later = Publisher(down.model_copy(update={"bootstrap_servers": kafka_bootstrap}))
    try:
        assert later.drain(30)
    finally:
        later.close()
    events = events_of(kafka_bootstrap, topic, run_id, expect=11)
    assert [e.type for e in events] == EXPECTED_TYPES
    assert {e.tenant_id for e in events} == {"acme"}


def test_a_port_in_use_is_an_error_naming_it(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                *(sys.executable, "-m", "runtrail_tools.cli.main", "run", "otlp-ingest"),
                *("-o", f"http_port={port}", "--metrics-port", "0"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                "PATH": "/usr/bin:/bin",
                "RUNTRAIL_STATE_DIR": str(tmp_path),
                "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
            },
        )
    assert done.returncode == 2, done.stderr
    assert "otlp-ingest: cannot listen" in done.stderr and "in use" in done.stderr


def drops_listed(state_dir: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """What ``runtrail otlp drops --json`` lists from the store the services wrote."""
    from runtrail_tools.cli.main import main

    capsys.readouterr()
    assert main(["otlp", "drops", "--json", "--state-dir", str(state_dir), *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_what_was_not_recorded_is_listed_per_run_and_reason(
    receiver: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = "5b8efff798038103d269b633813fc60c"  # json_span's trace
    spans = otlp_json(
        [
            json_span("eee19b7ec3c1b174", "chat", {"gen_ai.operation.name": "chat"}, "a" * 16),
            json_span("ccc19b7ec3c1b174", "GET /", {"http.method": "GET"}, "a" * 16),
            json_span("ddd19b7ec3c1b174", "SELECT", {"db.system": "sqlite"}, "a" * 16),
        ]
    )
    logs = json.dumps(
        {
            "resourceLogs": [
                {
                    "scopeLogs": [
                        {
                            "logRecords": [
                                {"eventName": "gen_ai.user.message", "body": {"stringValue": "hi"}},
                                {
                                    "traceId": run_id,
                                    "spanId": "ccc19b7ec3c1b174",
                                    "eventName": "app.audit",
                                },
                            ]
                        }
                    ]
                }
            ]
        }
    ).encode()
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    assert post(receiver.url, spans, auth)[0] == 200
    assert (
        post(receiver.url, spans.replace(b'"ccc', b'"ccd').replace(b'"ddd', b'"dde'), auth)[0]
        == 200
    )
    logs_url = receiver.url.replace("/v1/traces", "/v1/logs")
    assert post(logs_url, logs, auth)[0] == 200

    state = tmp_path / "state"
    rows = drops_listed(state, capsys, "--tenant", "acme", "--run", run_id)
    got = {(r["reason"], r["count"], r["sample"]) for r in rows}
    # per request, not per span: two requests, each one row per reason, the counts added
    assert got == {
        ("not-genai", 4, "GET /"),
        ("model-without-content", 2, "chat"),
        ("log-not-genai", 1, "app.audit"),
    }
    assert {r["runId"] for r in rows} == {run_id}
    assert all(r["firstSeenMs"] <= r["lastSeenMs"] for r in rows)
    # a log record with no span context belongs to no run: listed apart
    no_run = drops_listed(state, capsys, "--no-run")
    assert [(r["tenantId"], r["runId"], r["reason"], r["count"]) for r in no_run] == [
        ("acme", None, "log-without-span", 1)
    ]
    assert drops_listed(state, capsys, "--tenant", "other") == []
    assert drops_listed(state, capsys, "--since", "2030-01-01T00:00:00Z") == []
    assert len(drops_listed(state, capsys, "--since", "1h")) == 4
