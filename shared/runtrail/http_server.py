"""What every HTTP endpoint of runtrail shares: a threaded server on a daemon thread, and bearer
tokens that map to tenants.

The metrics/health endpoint of every service, the resume-cache lookup API and the sessions API
all serve from the standard library (no framework to deploy), one thread per connection.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


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


def load_tenant_tokens(tokens: Mapping[str, str], tokens_file: Path | None) -> dict[str, str]:
    """Tenant → bearer token from a settings mapping and a JSON file ``{tenant: token}`` (the
    file wins per tenant); an empty token is refused (it would match an empty header)."""
    merged = dict(tokens)
    if tokens_file is not None:
        loaded = json.loads(tokens_file.read_text())
        if not isinstance(loaded, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()
        ):
            raise ValueError(f"{tokens_file}: expected a JSON object tenant -> token")
        merged.update(loaded)
    empty = [t for t, tok in merged.items() if not tok]
    if empty:
        raise ValueError(f"empty token for tenant(s) {', '.join(sorted(empty))}")
    return merged
