"""What every runtrail HTTP endpoint answers alike (:func:`runtrail.http_server.send_body`)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPMessage
from http.server import BaseHTTPRequestHandler

import pytest

from runtrail.http_server import BackgroundServer, send_body


class Answers(BaseHTTPRequestHandler):
    """``/<status>`` answers that status through :func:`send_body`."""

    def do_GET(self) -> None:
        status = int(self.path.strip("/"))
        extra = {"Retry-After": "5"} if status == 503 else None
        send_body(self, status, "text/plain", b"body\n", realm="runtrail-test", headers=extra)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    server = BackgroundServer("127.0.0.1", 0, Answers, "test-http")
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


def answer(port: int, status: int) -> tuple[int, HTTPMessage, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{status}", timeout=5) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_a_401_names_the_realm_of_the_token_it_wants(port: int) -> None:
    status, headers, body = answer(port, 401)
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="runtrail-test"'
    assert body == b"body\n"


def test_other_answers_carry_their_type_length_and_extra_headers_only(port: int) -> None:
    status, headers, body = answer(port, 200)
    assert (status, body) == (200, b"body\n")
    assert headers["Content-Type"] == "text/plain"
    assert headers["Content-Length"] == "5"
    assert "WWW-Authenticate" not in headers
    status, headers, _ = answer(port, 503)
    assert status == 503
    assert headers["Retry-After"] == "5"
    assert "WWW-Authenticate" not in headers
