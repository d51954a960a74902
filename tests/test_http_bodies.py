"""Every HTTP endpoint that takes a request body, fed bodies a client sends by mistake or on
purpose, over real HTTP to the real processes (``runtrail run command-api`` and ``runtrail run
otlp-ingest``, each started once for the module): bytes that are not UTF-8, a byte order mark,
duplicate keys, nesting 100,000 deep, numbers past what a double or 64 bits hold, NaN, a
top-level value that is not an object, no body, a wrong media type or encoding, a gzip bomb, a
truncated or concatenated gzip, protobuf garbage.

Each must be answered with a 4xx whose body names what was wrong (never a 500, a dropped
connection or a traceback in the process's log), and a refused body must leave nothing behind:
no command in the store, no event on the topic.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from runtrail.persistence.urls import sqlite_url
from tests.support import ServiceProcess, create_topic, unique_topic, wait_for

TOKEN = "tok-bodies-acme"
MAX_BODY = 256 * 1024
MAX_DECODED = 1024 * 1024


@dataclass
class Served:
    """A server process: where it listens, its log (checked for tracebacks after each test)."""

    host: str
    port: int
    log_path: Path
    topic: str = ""
    bootstrap: str = ""

    def post(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, str]:
        """The status, body and Content-Type of one POST (a dropped connection raises)."""
        given = {"Authorization": f"Bearer {TOKEN}", **(headers or {})}
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request("POST", path, body=body, headers=given)
            response = connection.getresponse()
            return response.status, response.read(), response.getheader("Content-Type") or ""
        finally:
            connection.close()

    def get(self, path: str) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()


def _serve(service: str, tmp: Path, env: dict[str, str], options: dict[str, str]) -> Any:
    """``runtrail run SERVICE`` as a user starts it, on free ports; (process, HTTP port)."""
    log_path = tmp / f"{service}.log"
    process = ServiceProcess(
        service,
        env.get("RUNTRAIL_BOOTSTRAP_SERVERS", "127.0.0.1:1"),
        env.get("RUNTRAIL_EVENTS_TOPIC", "unused"),
        group=f"bodies-{uuid.uuid4().hex[:8]}",
        options={"http_port": "0", **options},
        env={"RUNTRAIL_STATE_DIR": str(tmp / "state"), **env},
        log_path=log_path,
    )
    pattern = re.compile(rf"{service} \(pid {process.proc.pid}\b[^\n]*? on 127\.0\.0\.1:(\d+)")
    found: list[int] = []

    def listening() -> bool:
        assert process.alive(), log_path.read_text()
        match = pattern.search(log_path.read_text())
        if match:
            found.append(int(match.group(1)))
        return bool(match)

    wait_for(listening, 60, what=f"{service} listening")
    return process, found[0]


@pytest.fixture(scope="module")
def command_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("command-api")
    process, port = _serve(
        "command-api",
        tmp,
        {"RUNTRAIL_COMMAND_API_TOKENS": json.dumps({"acme": TOKEN})},
        {"store": sqlite_url(tmp / "commands.db")},
    )
    try:
        yield Served("127.0.0.1", port, process.log_path)
        assert process.terminate() == 0
    finally:
        process.close()


@pytest.fixture(scope="module")
def otlp(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The receiver in mode map onto a one-partition events topic of its own (so an event of a
    refused request would be on it before the marker a later accepted request leaves)."""
    tmp = tmp_path_factory.mktemp("otlp-ingest")
    topic = create_topic(kafka_bootstrap, unique_topic("bodies-events"), partitions=1)
    process, port = _serve(
        "otlp-ingest",
        tmp,
        {
            "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "RUNTRAIL_EVENTS_TOPIC": topic,
            "RUNTRAIL_SPOOL_DIR": str(tmp / "spool"),
            "RUNTRAIL_OTLP_INGEST_TOKENS": json.dumps({"acme": TOKEN}),
        },
        {"max_body_bytes": str(MAX_BODY), "max_decoded_bytes": str(MAX_DECODED)},
    )
    try:
        yield Served("127.0.0.1", port, process.log_path, topic, kafka_bootstrap)
        assert process.terminate() == 0
    finally:
        process.close()


def _no_new_traceback(served: Served, before: int) -> None:
    text = served.log_path.read_text(errors="replace")[before:]
    assert "Traceback" not in text and " 500 " not in text, text[-3000:]


@pytest.fixture
def api(command_api: Served) -> Iterator[Served]:
    """The command API; the test fails if its log took a traceback meanwhile."""
    before = len(command_api.log_path.read_text(errors="replace"))
    yield command_api
    _no_new_traceback(command_api, before)


@pytest.fixture
def ingest(otlp: Served) -> Iterator[Served]:
    """The OTLP receiver; the test fails if its log took a traceback meanwhile."""
    before = len(otlp.log_path.read_text(errors="replace"))
    yield otlp
    _no_new_traceback(otlp, before)


# --- the command API ---------------------------------------------------------------------------

JSON_TYPE = {"Content-Type": "application/json"}


def _command(name: str, version: int, data: Any, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "expectedVersion": version,
        "idempotencyKey": f"k-{uuid.uuid4().hex}",
        "data": data,
        **more,
    }


def _accept() -> bytes:
    return json.dumps(_command("accept_run", 0, {"goalRef": "g", "policyVersion": "p"})).encode()


def _new_run(api: Served) -> str:
    run = f"run-{uuid.uuid4().hex[:10]}"
    status, answer, _ = api.post(f"/v1/runs/{run}/commands", _accept(), JSON_TYPE)
    assert status == 200, answer
    return run


def _refused(api: Served, run: str, body: bytes, status: int, *names: str, **headers: str) -> None:
    """``body`` posted as a command on ``run`` is refused with ``status``, its reason naming
    each of ``names``; the refusal kept nothing (a 400 records no refusal either)."""
    _, before = api.get(f"/v1/runs/{run}/events")
    answer_status, answer, ctype = api.post(
        f"/v1/runs/{run}/commands", body, {**JSON_TYPE, **headers}
    )
    assert answer_status == status, (answer_status, answer[:500])
    assert ctype == "application/json"
    reason = json.loads(answer)["reason"]
    for name in names:
        assert name in reason, (name, reason)
    _, after = api.get(f"/v1/runs/{run}/events")
    assert after == before


#: A prompt value a JSON parser reads but the store cannot hold as sent, and what the refusal
#: names. Each was a fault: ``1e400`` was accepted and recorded as null (a double overflows to
#: Infinity, which the event's JSON writes as null); the others crashed the store's encoder
#: after the command was decided (a 500, the client left not knowing the outcome).
UNHOLDABLE = {
    "overflows-to-infinity": (b"1e400", "inf"),
    "negative-overflow": (b"-1e400", "inf"),
    "past-64-bits": (str(2**70).encode(), "64-bit"),
    "negative-past-64-bits": (str(-(2**70)).encode(), "64-bit"),
    "nested-past-the-event-limit": (b"[" * 300 + b"]" * 300, "deeper than 128"),
    "lone-surrogate": (b'"\\ud800"', "surrogates"),
    "lone-surrogate-key": (b'{"\\udfff": 1}', "surrogates"),
}


@pytest.mark.parametrize("value", UNHOLDABLE.values(), ids=list(UNHOLDABLE))
def test_a_value_the_store_cannot_hold_is_a_400_naming_it(
    api: Served, value: tuple[bytes, str]
) -> None:
    """Fault: ``1e400`` in a command's data was accepted (200) and recorded as null; an integer
    past 64 bits, data nested past the event limit and a lone surrogate answered 500 (the
    store's encoder raised). Now each is a 400 naming what is wrong, and nothing is recorded."""
    raw, named = value
    run = _new_run(api)
    body = json.dumps(_command("require_input", 1, {"requestId": "q", "prompt": "X"}))
    _refused(api, run, body.encode().replace(b'"X"', raw), 400, named)
    _, shown = api.get(f"/v1/runs/{run}")
    assert shown["version"] == 1


DEEP = b"[" * 100_000 + b"]" * 100_000

#: A whole body the JSON parser itself failed on with an exception the handler did not catch.
UNPARSED = {
    "100000-deep": (DEEP, "nested too deep"),
    "100000-deep-in-data": (
        _accept().replace(b'"policyVersion": "p"', b'"policyVersion": ' + DEEP),
        "nested too deep",
    ),
    "nan-literal": (_accept().replace(b'"p"', b"NaN"), "NaN"),
    "infinity-literal": (_accept().replace(b'"p"', b"-Infinity"), "Infinity"),
}


@pytest.mark.parametrize("value", UNPARSED.values(), ids=list(UNPARSED))
def test_a_body_the_parser_fails_on_is_a_400_not_a_500(
    api: Served, value: tuple[bytes, str]
) -> None:
    """Fault: a body nested 100,000 deep (RecursionError) and NaN/Infinity literals (refused by
    the parser with an error the handler did not catch) answered 500 with a traceback in the
    log. Now a 400 naming the reason; no run is opened."""
    body, named = value
    run = f"run-{uuid.uuid4().hex[:10]}"
    _refused(api, run, body, 400, named)
    assert api.get(f"/v1/runs/{run}")[0] == 404


#: Bodies that were already refused as they should be: kept so (a 400 naming the reason).
NOT_COMMANDS = {
    "invalid-utf8": (_accept().replace(b'"g"', b'"g\xff"'), "utf-8"),
    "utf-16": (_accept().decode().encode("utf-16"), "utf-8"),
    "duplicate-key": (
        b'{"name": "accept_run", "name": "fail_run", "expectedVersion": 0, '
        b'"idempotencyKey": "k-dup", "data": {"goalRef": "g", "policyVersion": "p"}}',
        "duplicate key 'name'",
    ),
    "duplicate-key-in-data": (
        _accept().replace(b'"goalRef": "g"', b'"goalRef": "g", "goalRef": "h"'),
        "duplicate key 'goalRef'",
    ),
    "5000-digits": (_accept().replace(b'"p"', b"9" * 5000), "digits"),
    "version-past-64-bits": (
        _accept().replace(b'"expectedVersion": 0', f'"expectedVersion": {2**64}'.encode()),
        "expectedVersion",
    ),
    "version-1e400": (
        _accept().replace(b'"expectedVersion": 0', b'"expectedVersion": 1e400'),
        "expectedVersion",
    ),
    "array": (b"[]", "JSON object"),
    "string": (b'"accept_run"', "JSON object"),
    "null": (b"null", "JSON object"),
    "empty": (b"", "Expecting value"),
    "whitespace": (b" \r\n", "Expecting value"),
}


@pytest.mark.parametrize("value", NOT_COMMANDS.values(), ids=list(NOT_COMMANDS))
def test_a_body_that_is_not_a_command_is_a_400_naming_why(
    api: Served, value: tuple[bytes, str]
) -> None:
    """Fault (``utf-16``): a UTF-16 body was silently read (the parser guessed the encoding);
    JSON between systems is UTF-8 (RFC 8259), now refused naming it. The others were refused
    already, kept so. Duplicate keys are refused (not "the last one wins"): a client and the
    server could otherwise disagree on which command or data was sent."""
    body, named = value
    run = f"run-{uuid.uuid4().hex[:10]}"
    _refused(api, run, body, 400, named)
    assert api.get(f"/v1/runs/{run}")[0] == 404


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/x-www-form-urlencoded"},
        {"Content-Type": "multipart/form-data; boundary=x"},
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
    ],
    ids=["text-plain", "form", "multipart", "gzip"],
)
def test_a_body_of_another_media_type_or_encoding_is_a_415(
    api: Served, headers: dict[str, str]
) -> None:
    """Fault: a valid command sent as ``text/plain`` or as a form was silently read as JSON and
    executed (200); a gzip body answered a 400 about a UTF-8 byte at position 1. Now 415
    naming the header, and the run is not opened."""
    run = f"run-{uuid.uuid4().hex[:10]}"
    body = _accept()
    if "Content-Encoding" in headers:
        body = gzip.compress(body)
    name = "Content-Encoding" if "Content-Encoding" in headers else "Content-Type"
    _refused(api, run, body, 415, name, **headers)
    assert api.get(f"/v1/runs/{run}")[0] == 404


@pytest.mark.parametrize(
    "headers",
    [{}, {"Content-Type": "application/json; charset=utf-8"}, {"Content-Type": "x/y+json"}],
    ids=["none", "charset", "suffix"],
)
def test_a_json_body_without_or_with_a_json_media_type_is_read(
    api: Served, headers: dict[str, str]
) -> None:
    """A command without a Content-Type (curl's ``--data-binary`` with no header) is read as
    JSON, as is any ``…+json`` type; only a declared other type is refused."""
    run = f"run-{uuid.uuid4().hex[:10]}"
    status, answer, _ = api.post(f"/v1/runs/{run}/commands", _accept(), headers)
    assert status == 200, answer


def test_a_byte_order_mark_is_skipped_and_numbers_in_range_are_kept_as_sent(api: Served) -> None:
    """A UTF-8 byte order mark before the JSON is skipped (RFC 8259 allows it); ``-0`` reads as
    0, and an integer up to 2^64 - 1 is recorded exactly (not rounded through a double)."""
    run = f"run-{uuid.uuid4().hex[:10]}"
    status, answer, _ = api.post(f"/v1/runs/{run}/commands", b"\xef\xbb\xbf" + _accept(), JSON_TYPE)
    assert status == 200, answer
    for version, raw, kept in [(1, b"-0", 0), (3, str(2**64 - 1).encode(), 2**64 - 1)]:
        body = json.dumps(_command("require_input", version, {"requestId": "q", "prompt": "X"}))
        status, answer, _ = api.post(
            f"/v1/runs/{run}/commands", body.encode().replace(b'"X"', raw), JSON_TYPE
        )
        assert status == 200, answer
        assert json.loads(answer)["events"][0]["data"]["prompt"] == kept
        if version == 1:
            body = json.dumps(_command("provide_input", 2, {"requestId": "q"}))
            assert api.post(f"/v1/runs/{run}/commands", body.encode(), JSON_TYPE)[0] == 200


@pytest.mark.parametrize(
    "body", [b"\xff\xfe[[[[", DEEP, b"x" * (2 * 1024 * 1024)], ids=["garbage", "deep", "large"]
)
def test_resume_ignores_its_body(api: Served, body: bytes) -> None:
    """``POST /resume`` takes no body: whatever is sent is not parsed, the answer is the
    run's (here: none), never a 500."""
    run = f"run-{uuid.uuid4().hex[:10]}"
    status, answer, _ = api.post(f"/v1/runs/{run}/resume", body, {"Content-Type": "text/plain"})
    assert status == 422 and json.loads(answer)["code"] == "not-found", answer


# --- the OTLP receiver -------------------------------------------------------------------------

PROTOBUF = {"Content-Type": "application/x-protobuf"}
OTLP_JSON = {"Content-Type": "application/json"}


def _span(trace: str, *, genai: bool = True) -> dict[str, Any]:
    attributes = (
        [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
        ]
        if genai
        else [{"key": "http.method", "value": {"stringValue": "GET"}}]
    )
    return {
        "traceId": trace,
        "spanId": os.urandom(8).hex(),
        "name": "chat",
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
        "attributes": attributes,
    }


def _traces(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": list(spans)}]}]}


def _protobuf(document: dict[str, Any]) -> bytes:
    """The OTLP JSON ``document`` (hex IDs) as an ExportTraceServiceRequest's bytes."""
    spans = [dict(span) for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    for span in spans:
        for key in ("traceId", "spanId"):
            span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    request = ExportTraceServiceRequest()
    json_format.ParseDict(_traces(*spans), request)
    return bytes(request.SerializeToString())


def _trace_id() -> str:
    return os.urandom(16).hex()


def _published_keys(ingest: Served) -> set[bytes]:
    """The keys (trace IDs) on the events topic, read after a fresh accepted request's events
    (its trace ID the marker): whatever an earlier request published is on it by then."""
    marker = _trace_id()
    status, answer, _ = ingest.post(
        "/v1/traces", json.dumps(_traces(_span(marker))).encode(), OTLP_JSON
    )
    assert status == 200, answer
    consumer = Consumer(
        {
            "bootstrap.servers": ingest.bootstrap,
            "group.id": f"bodies-reader-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([ingest.topic])
    keys: set[bytes] = set()
    try:

        def marker_seen() -> bool:
            for message in consumer.consume(500, 0.5):
                key = message.key() if message.error() is None else None
                if isinstance(key, bytes):
                    keys.add(key)
            return marker.encode() in keys

        wait_for(marker_seen, 60, what="the marker's events")
    finally:
        consumer.close()
    return keys


def _status_message(answer: bytes, ctype: str) -> str:
    """The message of a ``google.rpc.Status`` refusal, JSON or protobuf (field 2)."""
    if ctype == "application/json":
        return str(json.loads(answer)["message"])
    assert answer[:1] == b"\x08", answer  # field 1: code
    start = answer.index(b"\x12") + 1
    while answer[start] & 0x80:  # the length's varint
        start += 1
    return answer[start + 1 :].decode()


def _otlp_refused(
    ingest: Served, path: str, body: bytes, headers: dict[str, str], status: int, named: str
) -> None:
    answer_status, answer, ctype = ingest.post(path, body, headers)
    assert answer_status == status, (answer_status, answer[:500])
    wanted = headers.get("Content-Type")
    assert ctype == (wanted if wanted == PROTOBUF["Content-Type"] else "application/json")
    message = _status_message(answer, ctype)
    assert named.lower() in message.lower(), (named, message)


#: JSON bodies of the wrong shape, and the field the refusal names: the receiver's pass turning
#: hex IDs into base64 iterated or looked keys up in whatever was there, and a string, a number
#: or an object crashed it.
MISSHAPEN = {
    "string": ('{"%(r)s": "abc"}', "r"),
    "number": ('{"%(r)s": 5}', "r"),
    "object": ('{"%(r)s": {"a": 1}}', "r"),
    "scopes-string": ('{"%(r)s": [{"%(s)s": "x"}]}', "s"),
    "resource-a-list": ('{"%(r)s": [[{"%(s)s": []}]]}', "r"),
    "items-a-number": ('{"%(r)s": [{"%(s)s": [{"%(i)s": 7}]}]}', "i"),
    "duplicate-the-last-a-number": ('{"%(r)s": [], "%(r)s": 5}', "r"),
}
NAMES = {
    "/v1/traces": {"r": "resourceSpans", "s": "scopeSpans", "i": "spans"},
    "/v1/logs": {"r": "resourceLogs", "s": "scopeLogs", "i": "logRecords"},
}


@pytest.mark.parametrize("path", list(NAMES))
@pytest.mark.parametrize("shape", MISSHAPEN.values(), ids=list(MISSHAPEN))
def test_otlp_json_of_the_wrong_shape_is_a_400_naming_the_field(
    ingest: Served, path: str, shape: tuple[str, str]
) -> None:
    """Fault: ``{"resourceSpans": "abc"}`` (or a number, an object, a scope list that is a
    string…) answered 500 with an AttributeError/TypeError traceback, and an exporter retries
    a 500. Now the protobuf JSON parser's 400, naming the field. (Of duplicate keys the last
    wins, as orjson reads them.)"""
    template, field = shape
    names = NAMES[path]
    _otlp_refused(ingest, path, (template % names).encode(), OTLP_JSON, 400, names[field])


def _gzip_members(*bodies: bytes) -> bytes:
    return b"".join(gzip.compress(body) for body in bodies)


def test_a_gzip_body_of_several_members_is_read_whole(ingest: Served) -> None:
    """Fault: a gzip body of two members (RFC 1952 allows any number one after another; pigz
    and streaming writers make them) was read to the end of the first: the spans of the second
    were silently dropped, and the answer a 200 without partial success. Now both members'
    spans are recorded."""
    first, second = _trace_id(), _trace_id()
    body = _gzip_members(_protobuf(_traces(_span(first))), _protobuf(_traces(_span(second))))
    status, answer, _ = ingest.post("/v1/traces", body, {**PROTOBUF, "Content-Encoding": "gzip"})
    assert status == 200, answer
    keys = _published_keys(ingest)
    assert {first.encode(), second.encode()} <= keys


def test_a_truncated_gzip_body_is_a_400_and_records_nothing(ingest: Served) -> None:
    """Fault: a gzip body cut before its trailer (the CRC and length that say the data is
    whole) was accepted as if complete (200, spans recorded). A body cut anywhere is now a
    400 naming the truncation; cut in the data it was a 400 already, for JSON, by the parser."""
    cut_trailer, cut_data = _trace_id(), _trace_id()
    whole = gzip.compress(_protobuf(_traces(_span(cut_trailer))))
    gzipped = {**PROTOBUF, "Content-Encoding": "gzip"}
    _otlp_refused(ingest, "/v1/traces", whole[:-8], gzipped, 400, "truncated")
    whole = gzip.compress(json.dumps(_traces(_span(cut_data))).encode())
    json_gzipped = {**OTLP_JSON, "Content-Encoding": "gzip"}
    _otlp_refused(ingest, "/v1/traces", whole[: len(whole) // 2], json_gzipped, 400, "truncated")
    keys = _published_keys(ingest)
    assert cut_trailer.encode() not in keys and cut_data.encode() not in keys


def test_bodies_the_receiver_refuses_are_named_and_record_nothing(ingest: Served) -> None:
    """What was already refused as it should be, kept so: each a 4xx whose Status names the
    reason, and none of their spans published (checked on the topic)."""
    refused: list[str] = []

    def traces(**more: Any) -> tuple[str, bytes]:
        trace = _trace_id()
        refused.append(trace)
        span = {**_span(trace), **more}
        return trace, json.dumps(_traces(span)).encode()

    gzipped = {**OTLP_JSON, "Content-Encoding": "gzip"}
    cases: list[tuple[bytes, dict[str, str], int, str]] = []
    _, body = traces()
    cases += [
        (body.replace(b'"chat"', b'"ch\xffat"', 1), OTLP_JSON, 400, "UTF-8"),
        (b"\xef\xbb\xbf" + body, OTLP_JSON, 400, "byte order mark"),
        (body, {"Content-Type": "text/plain"}, 415, "Content-Type"),
        (body, {}, 415, "Content-Type"),
        (body, {**OTLP_JSON, "Content-Encoding": "br"}, 415, "Content-Encoding"),
        (gzip.compress(b" " * (MAX_DECODED + 1)), gzipped, 413, "inflates past"),
        (gzip.compress(b"[" * 50_000_000), gzipped, 413, "inflates past"),
        (b"not gzip", gzipped, 400, "does not inflate"),
        (b"\xff" * 100, PROTOBUF, 400, "ExportTraceServiceRequest"),
        (os.urandom(4096), PROTOBUF, 400, "ExportTraceServiceRequest"),
        (_protobuf(_traces(_span(_trace_id())))[:-3], PROTOBUF, 400, "ExportTraceServiceRequest"),
        (b"[" * 100_000 + b"]" * 100_000, OTLP_JSON, 400, "OTLP JSON"),
        (b"[]", OTLP_JSON, 400, "not an object"),
        (b'"x"', OTLP_JSON, 400, "not an object"),
        (b"null", OTLP_JSON, 400, "not an object"),
        (b"", OTLP_JSON, 400, "empty"),
    ]
    for raw, named in [
        (b"1e400", "infinity"),
        (b"NaN", "expected a JSON value"),
        (b"9" * 5000, "infinity"),
        (str(2**64).encode(), "out of range"),
    ]:
        _, body = traces()
        cases.append((body.replace(b'"1000"', raw, 1), OTLP_JSON, 400, named))
    _, body = traces(traceId="zz" * 16)
    cases.append((body, OTLP_JSON, 400, "not hex"))
    _, body = traces(spanId="ab")
    cases.append((body, OTLP_JSON, 400, "spanId 8"))
    for body, headers, status, named in cases:
        _otlp_refused(ingest, "/v1/traces", body, headers, status, named)
    keys = _published_keys(ingest)
    assert not {trace.encode() for trace in refused} & keys


def test_a_request_recorded_in_part_says_so_in_partial_success(ingest: Served) -> None:
    """A span without ``gen_ai.*`` attributes in a request whose other span is recorded: 200,
    ``partial_success.rejected_spans`` 1 and why (protobuf answer to a protobuf request)."""
    kept, other = _trace_id(), _trace_id()
    body = _protobuf(_traces(_span(kept), _span(other, genai=False)))
    status, answer, ctype = ingest.post("/v1/traces", body, PROTOBUF)
    assert status == 200 and ctype == PROTOBUF["Content-Type"]
    response = ExportTraceServiceResponse.FromString(answer)
    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message
    keys = _published_keys(ingest)
    assert kept.encode() in keys and other.encode() not in keys


def test_a_structured_attribute_nested_100000_deep_stays_text(ingest: Served) -> None:
    """Fault: ``gen_ai.input.messages`` holding JSON text nested 100,000 deep crashed the
    mapping (RecursionError: a 500 an exporter retries, after the request's earlier spans may
    have been published). Now the text that does not parse stays text, as any non-JSON text
    does, and the span is recorded."""
    trace = _trace_id()
    span = _span(trace)
    deep = "[" * 100_000 + "]" * 100_000
    span["attributes"].append({"key": "gen_ai.input.messages", "value": {"stringValue": deep}})
    status, answer, _ = ingest.post("/v1/traces", json.dumps(_traces(span)).encode(), OTLP_JSON)
    assert status == 200, answer
    assert trace.encode() in _published_keys(ingest)
