"""Who is asking: a tenant's bearer token in an ``Authorization`` header (scripts), or a
signed-in browser's session cookie, mapped to a tenant by the same :class:`TokenAuth` every
runtrail API uses.

The cookie never holds the token: signing in trades the token for a random session ID
(256 bits) kept in this process, which logout forgets, so a cookie copied after logout (or
from a log) opens nothing. Sessions live in memory: a restarted explorer signs everyone out.
The cookie is HttpOnly (no script reads it) and SameSite=Strict (no other site's page can
post with it). The tenant comes from the token alone; nothing in a URL can name another, so
another tenant's run answers 404, exactly like a run that does not exist.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response

from runtrail.http_server import TokenAuth

COOKIE = "runtrail_session"
#: How long a session lasts without a new sign-in (the cookie's max-age too).
SESSION_S = 43200


class Sessions:
    """Session ID → (tenant, expiry): the only place a browser's sign-in is remembered."""

    def __init__(self, lifetime_s: float = SESSION_S, clock: Callable[[], float] = time.monotonic):
        self._lifetime_s = lifetime_s
        self._clock = clock
        self._open: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def open(self, tenant: str) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            now = self._clock()
            self._open = {k: v for k, v in self._open.items() if v[1] > now}  # drop expired
            self._open[session] = (tenant, now + self._lifetime_s)
        return session

    def tenant(self, session: str) -> str | None:
        with self._lock:
            found = self._open.get(session)
            if found is None:
                return None
            if found[1] <= self._clock():
                del self._open[session]
                return None
            return found[0]

    def close(self, session: str) -> None:
        with self._lock:
            self._open.pop(session, None)


class Auth:
    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._auth = TokenAuth(tokens)
        self.sessions = Sessions()

    def tenant_of_token(self, token: str) -> str | None:
        return self._auth.tenant_of(f"Bearer {token}") if token.strip() else None

    def tenant(self, request: Request) -> str | None:
        header = request.headers.get("authorization")
        if header:
            return self._auth.tenant_of(header)
        session = request.cookies.get(COOKIE)
        return self.sessions.tenant(session) if session else None

    def sign_in(self, token: str) -> str | None:
        """A new session for the token's tenant, or None for a token that is not valid."""
        tenant = self.tenant_of_token(token)
        return None if tenant is None else self.sessions.open(tenant)

    def sign_out(self, request: Request) -> None:
        session = request.cookies.get(COOKIE)
        if session:
            self.sessions.close(session)


def set_login(response: Response, session: str, secure: bool) -> None:
    response.set_cookie(
        COOKIE,
        session,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/",
        max_age=SESSION_S,
    )


def clear_login(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")
