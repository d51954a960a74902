"""The lookup API: per tenant, bearer-token authenticated, on its own port.

    GET /v1/tenants/{tenant}/entries/{model|tool}/{key}?run=R[&scope=run|tenant][&offsets=P:O,…][&wait_ms=N]
    GET /v1/tenants/{tenant}/runs/{run}[?offsets=P:O,…][&wait_ms=N]

``Authorization: Bearer <token>``; each token belongs to one tenant. No or an unknown token:
401. A token asking for **another tenant's** path gets exactly the 404 a genuine miss gets, so
the API does not even reveal whether that tenant has the key (principle 6: tenants never mix).

Answers: 200 ``{"entry": …}`` on a hit; 404 ``{"entry": null, "intent": …}`` on a miss that is
trustworthy (consumed past ``offsets``), with the run's open intent for that tool key if any;
503 ``{"error": "not caught up"}`` when the service could not consume that far within
``wait_ms`` (capped by the service's ``wait_timeout_ms``); 400 on a malformed request.
"""

from __future__ import annotations

import logging
import re
import time
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from runtrail.http_server import BackgroundServer, KeepAliveHandler, TokenAuth, send_body
from runtrail.resume.errors import NotCaughtUp
from runtrail.resume.keys import Kind, Scope
from runtrail.resume.remote import parse_offsets
from runtrail_services.resume_cache.index import LookupIndex
from runtrail_services.resume_cache.metrics import ResumeCacheMetrics

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"^/v1/tenants/([^/]+)/entries/(model|tool)/([0-9a-f]{64})$")
_RUN = re.compile(r"^/v1/tenants/([^/]+)/runs/([^/]+)$")
_MISS = {"entry": None, "intent": None}


class _BadRequest(ValueError):
    pass


def _handler(
    index: LookupIndex, auth: TokenAuth, metrics: ResumeCacheMetrics, max_wait_ms: int
) -> type[BaseHTTPRequestHandler]:
    class Handler(KeepAliveHandler):
        log_prefix = "resume-cache http"

        def _send(self, status: int, body: Any) -> None:
            data = orjson.dumps(body)
            send_body(self, status, "application/json", data, realm="runtrail-resume-cache")

        def do_GET(self) -> None:
            started = time.perf_counter()
            try:
                status, body, outcome = self._route()
            except _BadRequest as exc:
                status, body, outcome = 400, {"error": str(exc)}, "bad_request"
            except NotCaughtUp as exc:
                status, body, outcome = (
                    503,
                    {"error": "not caught up", "detail": str(exc)},
                    "not_caught_up",
                )
            except Exception:
                log.exception("resume-cache lookup failed")
                status, body, outcome = 500, {"error": "internal error"}, "error"
            metrics.lookup(outcome)
            metrics.lookup_seconds.labels(metrics.service).observe(time.perf_counter() - started)
            self._send(status, body)

        def _route(self) -> tuple[int, Any, str]:
            parts = urlsplit(self.path)
            caller = auth.tenant_of(self.headers.get("Authorization"))
            if caller is None:
                return 401, {"error": "a valid bearer token is required"}, "unauthorized"
            query = parse_qs(parts.query)
            entry_match = _ENTRY.match(parts.path)
            run_match = _RUN.match(parts.path)
            if entry_match is None and run_match is None:
                return 404, {"error": "not found"}, "bad_request"
            tenant = unquote((entry_match or run_match).group(1))  # type: ignore[union-attr]
            if tenant != caller:
                return 404, dict(_MISS), "miss"  # exactly what a miss looks like
            offsets, wait_s = self._barrier(query)
            if entry_match is not None:
                run = _one(query, "run")
                if not run:
                    raise _BadRequest("run is required")
                try:
                    scope = Scope(_one(query, "scope") or "run")
                except ValueError as exc:
                    raise _BadRequest("scope is run or tenant") from exc
                answer = index.lookup(
                    tenant=tenant,
                    run_id=run,
                    kind=Kind(entry_match.group(2)),
                    key=entry_match.group(3),
                    scope=scope,
                    min_offsets=offsets,
                    timeout_s=wait_s,
                )
                if answer.entry is not None:
                    return 200, {"entry": answer.entry.to_json()}, "hit"
                intent = answer.intent.to_json() if answer.intent is not None else None
                return 404, {"entry": None, "intent": intent}, "miss"
            assert run_match is not None
            state = index.run_state(
                tenant=tenant,
                run_id=unquote(run_match.group(2)),
                min_offsets=offsets,
                timeout_s=wait_s,
            )
            return 200, state.to_json(), "run_state"

        def _barrier(self, query: dict[str, list[str]]) -> tuple[dict[int, int], float]:
            try:
                offsets = parse_offsets(_one(query, "offsets"))
            except ValueError as exc:
                raise _BadRequest(f"offsets is PARTITION:OFFSET[,...]: {exc}") from exc
            try:
                wait = int(_one(query, "wait_ms") or max_wait_ms)
            except ValueError as exc:
                raise _BadRequest("wait_ms is a whole number of milliseconds") from exc
            return offsets, max(0, min(wait, max_wait_ms)) / 1000

    return Handler


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


class LookupServer(BackgroundServer):
    """The API on a daemon-threaded ThreadingHTTPServer (port 0 picks a free one)."""

    def __init__(
        self,
        host: str,
        port: int,
        index: LookupIndex,
        auth: TokenAuth,
        metrics: ResumeCacheMetrics,
        max_wait_ms: int,
    ) -> None:
        super().__init__(
            host, port, _handler(index, auth, metrics, max_wait_ms), "resume-cache-http"
        )
