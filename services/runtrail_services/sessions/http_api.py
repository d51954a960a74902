"""The session API: per tenant, bearer-token authenticated, read-only.

* ``GET /v1/sessions`` — the caller's tenant's sessions;
* ``GET /v1/sessions/{sessionId}`` — the latest snapshot of one of them (the stored document,
  digest included, so a client can verify it);
* ``GET /v1/sessions/{sessionId}?resolve=true`` — the same with its protected content opened
  (the token's tenant is entitled to it): ``[erased]`` where the content was erased or pruned,
  and ``"resolved": true``, since the digest covers the stored references, not this content.

A session the service halted (its stored snapshot was edited or cannot be trusted) answers
409 ``{"error", "sessionId", "status": "halted", "reason"}`` and is listed with
``"status": "halted"``: a client must not mistake the stored document for the session's state.

The token decides the tenant; nothing in the request can name another. A session of another
tenant is therefore looked up under the caller's tenant and answers 404, exactly like a session
that does not exist (a 403 would confirm that it does). No or an unknown token answers 401;
with no tokens configured every request does (fail closed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote

import orjson

from runtrail.http_server import BackgroundServer, TokenAuth, send_body
from runtrail.privacy.resolve import Resolver, resolved_snapshot
from runtrail.sessions import AgentSessionStore, SessionStoreError, UntrustedSnapshot

log = logging.getLogger(__name__)

PREFIX = "/v1/sessions"
#: The values of ``?resolve=`` and what they mean (empty: absent).
RESOLVE_VALUES = {"true": True, "1": True, "false": False, "0": False, "": False}
Response = tuple[int, bytes]


def _json(status: int, body: object) -> Response:
    return status, orjson.dumps(body)


class SessionsApi(BackgroundServer):
    """A threaded HTTP server answering session reads from ``store``."""

    def __init__(
        self,
        store: AgentSessionStore,
        tokens: Mapping[str, str],
        host: str,
        port: int,
        on_request: Callable[[int], None] | None = None,
        halted: Callable[[str, str], str | None] | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.store = store
        #: opens references for ``?resolve=true`` (none: every reference reads as erased)
        self.resolver = resolver or Resolver(None)
        self._resolving = threading.Lock()  # the server's threads share one content vault
        #: Why the service halted a (tenant, session), or None (a reader of live state).
        self._halted = halted or (lambda tenant, session: None)
        self.auth = TokenAuth(tokens)
        self._on_request = on_request or (lambda status: None)
        if not tokens:
            log.warning("sessions API: no bearer tokens configured; every request answers 401")
        super().__init__(host, port, self._handler(), "runtrail-sessions-api")

    # --- routes -------------------------------------------------------------------------------
    def answer(self, path: str, authorization: str | None) -> Response:
        """The status and JSON body for a GET of ``path``."""
        tenant = self.auth.tenant_of(authorization)
        if tenant is None:
            return _json(401, {"error": "a valid bearer token is required"})
        route, _, query = path.partition("?")
        route = route.rstrip("/")
        if route == PREFIX:
            return self._list(tenant)
        if route.startswith(PREFIX + "/"):
            session_id = unquote(route[len(PREFIX) + 1 :])
            if session_id and "/" not in route[len(PREFIX) + 1 :]:
                flag = parse_qs(query, keep_blank_values=True).get("resolve", [""])[-1].lower()
                if flag not in RESOLVE_VALUES:  # never read an unknown value as "false"
                    return _json(400, {"error": "resolve is true, 1, false or 0"})
                return self._get(tenant, session_id, resolve=RESOLVE_VALUES[flag])
        return _json(404, {"error": "not found"})

    def _list(self, tenant: str) -> Response:
        try:
            sessions = self.store.list(tenant)
        except SessionStoreError as exc:
            log.error("sessions API: cannot list %s: %s", tenant, exc)
            return _json(503, {"error": "session store unavailable"})
        listed: list[dict[str, str]] = []
        for summary in sessions:
            entry = summary.as_json()
            reason = self._halted(tenant, summary.session_id)
            if reason is not None:
                entry.update(status="halted", reason=reason)
            listed.append(entry)
        return _json(200, {"tenantId": tenant, "sessions": listed})

    def _get(self, tenant: str, session_id: str, *, resolve: bool = False) -> Response:
        reason = self._halted(tenant, session_id)
        if reason is not None:
            body = {
                "error": "the session is halted: its stored snapshot cannot be trusted",
                "sessionId": session_id,
                "status": "halted",
                "reason": reason,
            }
            return _json(409, body)
        try:
            snapshot = self.store.load(tenant, session_id)
        except (SessionStoreError, UntrustedSnapshot) as exc:
            # the detail names server paths or rows: it goes to the log, not to the client
            log.error("sessions API: %s", exc)
            return _json(
                500, {"error": "the stored snapshot cannot be read", "sessionId": session_id}
            )
        if snapshot is None:
            return _json(404, {"error": "no such session", "sessionId": session_id})
        if resolve:
            with self._resolving:
                return _json(200, resolved_snapshot(self.resolver, snapshot))
        return 200, snapshot.to_bytes()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = api.answer(self.path, self.headers.get("Authorization"))
                api._on_request(status)
                send_body(self, status, "application/json", body, realm="runtrail-sessions")

            def log_message(self, format: str, *args: object) -> None:
                log.debug("sessions API: " + format, *args)

        return Handler
