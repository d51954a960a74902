"""The OTLP receiver's request framing over real HTTP (the server alone, a sink that records
what reaches it): ``Content-Length`` missing, negative or in a form ``str.isdigit`` accepts but
``int`` does not, and ``/v1/logs`` refusing a bad token, media type or size like
``/v1/traces`` does. A refusal must be the documented 4xx, never a 500 an exporter retries,
and must record nothing.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtrail.http_server import TokenAuth
from runtrail_services.otlp_ingest.http_api import IngestServer
from runtrail_services.otlp_ingest.metrics import IngestMetrics

TOKEN = "tok-acme"
MAX_BODY = 1024


class Sink:
    """Counts what the server hands on (a refused request must hand on nothing)."""

    def __init__(self) -> None:
        self.metrics = IngestMetrics(CollectorRegistry())
        self.accepting = True
        self.calls: list[str] = []

    def record(self, tenant: str, spans: list[Any]) -> Any:
        self.calls.append("spans")
        raise AssertionError("a refused request reached the sink")

    def record_logs(self, tenant: str, logs: list[Any]) -> Counter[str]:
        self.calls.append("logs")
        return Counter()


@pytest.fixture
def served() -> Iterator[tuple[int, Sink]]:
    sink = Sink()
    server = IngestServer(
        "127.0.0.1",
        0,
        sink,
        TokenAuth({"acme": TOKEN}),
        max_body_bytes=MAX_BODY,
        max_decoded_bytes=4 * MAX_BODY,
    )
    server.start()
    try:
        yield server.port, sink
    finally:
        server.stop()


def raw_post(port: int, path: str, head: list[bytes], body: bytes = b"") -> int:
    """POST with exactly these header lines; the answer's status."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        lines = [f"POST {path} HTTP/1.1".encode(), b"Host: x", *head]
        conn.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        status_line = conn.makefile("rb").readline()
    return int(status_line.split()[1])


AUTH = f"Authorization: Bearer {TOKEN}".encode()
JSON = b"Content-Type: application/json"


@pytest.mark.parametrize("path", ["/v1/traces", "/v1/logs"])
@pytest.mark.parametrize("length", [None, b"-1", b"abc", b"1e3", "²".encode("latin-1")])
def test_a_content_length_that_is_not_a_length_is_a_411(
    served: tuple[int, Sink], path: str, length: bytes | None
) -> None:
    """Without a usable ``Content-Length`` the receiver must answer 411; ``²`` (which
    ``str.isdigit`` accepts and ``int`` refuses) crashed the handler into a 500."""
    port, sink = served
    head = [AUTH, JSON] + ([] if length is None else [b"Content-Length: " + length])
    assert raw_post(port, path, head, b"{}") == 411, length
    assert sink.calls == []


def test_logs_refuse_a_bad_token_media_type_and_size(served: tuple[int, Sink]) -> None:
    """``/v1/logs`` must refuse as ``/v1/traces`` does: 401, 415, 413, and record nothing."""
    port, sink = served
    body = json.dumps({"resourceLogs": []}).encode()
    length = f"Content-Length: {len(body)}".encode()
    assert raw_post(port, "/v1/logs", [JSON, length], body) == 401
    assert raw_post(port, "/v1/logs", [b"Authorization: Bearer wrong", JSON, length], body) == 401
    assert raw_post(port, "/v1/logs", [AUTH, b"Content-Type: text/plain", length], body) == 415
    big = b" " * (MAX_BODY + 1)
    assert raw_post(port, "/v1/logs", [AUTH, JSON, f"Content-Length: {len(big)}".encode()]) == 413
    assert sink.calls == []
    assert raw_post(port, "/v1/logs", [AUTH, JSON, length], body) == 200
    assert sink.calls == ["logs"]
