"""What every HTTP endpoint of runtrail shares: a threaded server on a daemon thread, and bearer
tokens that map to tenants.

The metrics/health endpoint of every service, the resume-cache lookup API and the sessions API
all serve from the standard library (no framework to deploy), one thread per connection.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class BackgroundServer:
    """A ``ThreadingHTTPServer`` on ``host:port`` (0 picks a free port), served by a daemon thread."""

    def __init__(
        self, host: str, port: int, handler: type[BaseHTTPRequestHandler], name: str
    ) -> None:
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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
