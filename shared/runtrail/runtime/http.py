"""Per-process HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

Liveness means the consume loop has turned recently; readiness means it has joined its group,
received an assignment, nothing it writes to is unavailable and no partition is stopped by the
dead-letter limit. A stuck loop therefore fails ``/healthz`` and gets restarted; a service
waiting out a broker outage or a full disk keeps turning (200 on ``/healthz``) but answers 503
on ``/readyz``, naming what it waits for; so does one whose handler failed past the dead-letter
limit (:mod:`runtrail.runtime.dlq_limit`), naming the partition and the error, until a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from runtrail.config import Settings
from runtrail.http_server import BackgroundServer, QuietHandler, TokenAuth, send_body


class HealthState:
    """What the endpoint reports; the runtime updates it."""

    def __init__(self, stall_after_s: float = 60.0) -> None:
        self.stall_after_s = stall_after_s
        self.last_loop = time.monotonic()
        self.ready = False
        self.stopping = False
        #: what the service waits for (output or link -> error text); ready only when empty
        self.unavailable: dict[str, str] = {}
        #: partitions the dead-letter limit stopped ("topic[p]" -> why); kept until a restart
        self.stopped: dict[str, str] = {}
        #: a call the loop is blocked in (what, since); not ready once it lasts block_ready_s
        self.blocked: tuple[str, float] | None = None
        self.block_ready_s = 5.0

    def beat(self) -> None:
        self.last_loop = time.monotonic()

    def healthy(self) -> bool:
        return time.monotonic() - self.last_loop < self.stall_after_s

    @contextmanager
    def blocking(self, what: str) -> Iterator[None]:
        """Mark a wait that may last while the broker is away (a commit's result, awaited up to
        ``commit_timeout_s``): readiness turns 503 if it lasts."""
        self.blocked = (what, time.monotonic())
        try:
            yield
        finally:
            self.blocked = None

    def _blocked_too_long(self) -> bool:
        blocked = self.blocked
        return blocked is not None and time.monotonic() - blocked[1] >= self.block_ready_s

    def is_ready(self) -> bool:
        return (
            self.ready
            and not self.stopping
            and not self.unavailable
            and not self.stopped
            and self.healthy()
            and not self._blocked_too_long()
        )

    def not_ready_text(self) -> bytes:
        waits = "".join(
            f"{what} unavailable: {detail}\n" for what, detail in dict(self.unavailable).items()
        )
        waits += "".join(
            f"{what} stopped: {detail}\n" for what, detail in dict(self.stopped).items()
        )
        blocked = self.blocked
        if blocked is not None and self._blocked_too_long():
            waits += f"{blocked[0]} blocked for {time.monotonic() - blocked[1]:.0f}s\n"
        return b"not ready\n" + waits.encode("utf-8", "replace")


class EndpointAuth:
    """The optional bearer token of ``/metrics`` (and of the health paths, unless exempted).

    Why: metrics name tenants, runs' counts and store errors, and docker-compose and
    Kubernetes bind the endpoint to 0.0.0.0. Without a token everything is open (loopback).
    """

    def __init__(self, token: str | None, *, health_too: bool = True) -> None:
        self._auth = TokenAuth({"metrics": token}) if token else None
        self._health_too = health_too

    @classmethod
    def from_settings(cls, settings: Settings) -> EndpointAuth:
        return cls(settings.metrics_token, health_too=not settings.metrics_health_open)

    def allows(self, path: str, header: str | None) -> bool:
        if self._auth is None or (path != "/metrics" and not self._health_too):
            return True
        return self._auth.tenant_of(header) == "metrics"

    def shows_details(self, header: str | None) -> bool:
        """Whether ``/readyz`` may name what it waits for: error texts can hold paths and
        hosts, so with a token set, only its holder sees them (open health says only 503)."""
        return self._auth is None or self._auth.tenant_of(header) == "metrics"


def _handler(
    registry: CollectorRegistry, health: HealthState, auth: EndpointAuth
) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[str | None], tuple[int, str, bytes]]] = {
        "/metrics": lambda header: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
        "/healthz": lambda header: (
            (200, "text/plain", b"ok\n")
            if health.healthy()
            else (503, "text/plain", b"consume loop stalled\n")
        ),
        "/readyz": lambda header: (
            (200, "text/plain", b"ready\n")
            if health.is_ready()
            else (
                503,
                "text/plain",
                health.not_ready_text() if auth.shows_details(header) else b"not ready\n",
            )
        ),
    }

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            route = routes.get(path)
            header = self.headers.get("Authorization")
            if route is not None and not auth.allows(path, header):
                status, ctype, body = 401, "text/plain", b"bearer token required\n"
            else:
                status, ctype, body = (
                    route(header) if route else (404, "text/plain", b"not found\n")
                )
            send_body(self, status, ctype, body, realm="runtrail-metrics")

    return Handler


class HttpEndpoint(BackgroundServer):
    """``/metrics``, ``/healthz`` and ``/readyz`` of one service process."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        health: HealthState,
        auth: EndpointAuth | None = None,
    ) -> None:
        handler = _handler(registry, health, auth or EndpointAuth(None))
        super().__init__(host, port, handler, "runtrail-http")
