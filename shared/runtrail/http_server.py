"""What every HTTP endpoint of runtrail shares: a threaded server on a daemon thread, and bearer
tokens that map to tenants.

The metrics/health endpoint of every service, the resume-cache lookup API and the sessions API
all serve from the standard library (no framework to deploy), one thread per connection.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler whose access log lines go to DEBUG (not stderr), prefixed by
    :attr:`log_prefix`, on the logger of the module that defines the handler."""

    log_prefix: ClassVar[str] = "http"

    def log_message(self, format: str, *args: object) -> None:
        logging.getLogger(type(self).__module__).debug(f"{self.log_prefix}: {format}", *args)


class KeepAliveHandler(QuietHandler):
    """A handler for APIs called often by the same clients: HTTP/1.1 keep-alive, Nagle off
    (headers and body go out in two writes: with Nagle on, the body waits for the client's
    delayed ACK, about 40 ms a request on a kept-alive connection)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True


#: How often the serving thread checks for :meth:`BackgroundServer.stop` between requests.
#: ``serve_forever``'s default, 0.5 s, was the most of a service's stop: every service has a
#: metrics endpoint, the sessions and resume-cache services a second server, and each stop
#: waited out a poll. Twenty idle wake-ups a second cost nothing measurable.
STOP_POLL_S = 0.05


class BackgroundServer:
    """A ``ThreadingHTTPServer`` on ``host:port`` (0 picks a free port), served by a daemon thread."""

    def __init__(
        self, host: str, port: int, handler: type[BaseHTTPRequestHandler], name: str
    ) -> None:
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:  # the errno's text alone does not say which address
            raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(STOP_POLL_S,), name=name, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def send_body(
    handler: BaseHTTPRequestHandler,
    status: int,
    content_type: str,
    body: bytes,
    *,
    realm: str,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer with ``body``, its type and length; a 401 carries the bearer challenge naming
    ``realm`` (RFC 6750), so a client learns which token the endpoint wants."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    if status == 401:
        handler.send_header("WWW-Authenticate", f'Bearer realm="{realm}"')
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


class TokenAuth:
    """The tenant of a bearer token. Tokens are compared in constant time, and every token is
    compared (no early exit), so timing tells nothing about which tenant or token was close."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._pairs = [(tenant, token.encode()) for tenant, token in tokens.items() if token]

    def tenant_of(self, header: str | None) -> str | None:
        if not header:
            return None
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = token.strip().encode()
        found = None
        for tenant, expected in self._pairs:
            if hmac.compare_digest(given, expected) and found is None:
                found = tenant
        return found
