"""What every runtrail HTTP endpoint answers alike (:func:`runtrail.http_server.send_body`),
and how fast its server stops."""

from __future__ import annotations

import http.client
import logging
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPMessage
from http.server import BaseHTTPRequestHandler

import pytest

from runtrail.http_server import BackgroundServer, KeepAliveHandler, QuietHandler, send_body


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


class KeptAlive(KeepAliveHandler):
    log_prefix = "test api"

    def do_GET(self) -> None:
        send_body(self, 200, "text/plain", b"ok\n", realm="runtrail-test")


def test_a_keep_alive_handler_serves_http_1_1_and_logs_its_requests_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = BackgroundServer("127.0.0.1", 0, KeptAlive, "test-keep-alive")
    server.start()
    try:
        with caplog.at_level(logging.DEBUG, logger=__name__):
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            for _ in range(2):  # the second request rides the same connection
                connection.request("GET", "/twice")
                response = connection.getresponse()
                assert (response.status, response.read()) == (200, b"ok\n")
                assert response.version == 11 and not response.will_close
            connection.close()
    finally:
        server.stop()
    lines = [r for r in caplog.records if r.name == __name__]
    assert [r.levelno for r in lines] == [logging.DEBUG, logging.DEBUG]
    assert all(r.getMessage().startswith('test api: "GET /twice HTTP/1.1" 200') for r in lines)


def test_a_server_stops_without_waiting_out_a_half_second_poll() -> None:
    """Every service stops its metrics endpoint (the sessions and resume-cache services a
    second server too): with ``serve_forever``'s default poll, each stop waited up to 0.5 s
    for the serving thread to notice. Five idle servers, each stopped at a random moment of
    its poll: with that default, all five inside 0.25 s would happen 3 times in 100."""
    stops = []
    for _ in range(5):
        server = BackgroundServer("127.0.0.1", 0, QuietHandler, "test-stop")
        server.start()
        time.sleep(random.uniform(0.1, 0.6))
        started = time.perf_counter()
        server.stop()
        stops.append(time.perf_counter() - started)
    assert max(stops) < 0.25, stops


def test_a_port_in_use_is_named_in_the_error() -> None:
    """'cannot start: [Errno 98] Address already in use' named no port: a service started
    with --metrics-port of another process left the operator guessing which one."""
    import socket

    from runtrail.http_server import BackgroundServer, QuietHandler

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}: Address already"):
            BackgroundServer("127.0.0.1", port, QuietHandler, "test")
