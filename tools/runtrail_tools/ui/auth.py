"""Who is asking: a tenant's bearer token in an ``Authorization`` header (scripts), or a
signed-in browser's session cookie, mapped to a tenant by the same :class:`TokenAuth` every
runtrail API uses.

The cookie never holds the token: signing in trades the token for a random session ID
(256 bits) kept in this process, which logout forgets, so a cookie copied after logout (or
from a log) opens nothing. Sessions live in memory: a restarted explorer signs everyone out.
The cookie is HttpOnly (no script reads it) and SameSite=Strict (no other site's page can
post with it). Each session also holds its own form token (CSRF): every form that changes
something (a command to a run) carries it and is refused without it, a second defence beside
SameSite. The tenant comes from the token alone; nothing in a URL can name another, so
another tenant's run answers 404, exactly like a run that does not exist.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from runtrail.http_server import TokenAuth

COOKIE = "runtrail_session"
#: How long a session lasts without a new sign-in (the cookie's max-age too).
SESSION_S = 43200


@dataclass(frozen=True, slots=True)
class Session:
    tenant: str
    expires: float
    #: the token this session's forms carry (never the session ID: a page may show it)
    form_token: str


class Sessions:
    """Session ID → :class:`Session`: the only place a browser's sign-in is remembered."""

    def __init__(self, lifetime_s: float = SESSION_S, clock: Callable[[], float] = time.monotonic):
        self._lifetime_s = lifetime_s
        self._clock = clock
        self._open: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, tenant: str) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            now = self._clock()
            self._open = {k: v for k, v in self._open.items() if v.expires > now}  # expired
            self._open[session] = Session(tenant, now + self._lifetime_s, secrets.token_urlsafe(32))
        return session

    def get(self, session: str) -> Session | None:
        with self._lock:
            found = self._open.get(session)
            if found is None:
                return None
            if found.expires <= self._clock():
                del self._open[session]
                return None
            return found

    def tenant(self, session: str) -> str | None:
        found = self.get(session)
        return None if found is None else found.tenant

    def close(self, session: str) -> None:
        with self._lock:
            self._open.pop(session, None)


class Auth:
    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._auth = TokenAuth(tokens)
        #: tenant → token: what the explorer sends to the command API for a signed-in tenant
        self.tokens = dict(tokens)
        self.sessions = Sessions()

    def tenant_of_token(self, token: str) -> str | None:
        return self._auth.tenant_of(f"Bearer {token}") if token.strip() else None

    def tenant(self, request: Request) -> str | None:
        header = request.headers.get("authorization")
        if header:
            return self._auth.tenant_of(header)
        session = request.cookies.get(COOKIE)
        return self.sessions.tenant(session) if session else None

    def session(self, request: Request) -> tuple[str, Session] | None:
        """The browser session of a request (its ID and what it holds); None for a bearer
        header or no valid cookie."""
        if request.headers.get("authorization"):
            return None
        session = request.cookies.get(COOKIE)
        found = self.sessions.get(session) if session else None
        return None if found is None or session is None else (session, found)

    def form_token_valid(self, request: Request, given: str | None) -> bool:
        """Whether a form came from a page of this session (its form token, compared in
        constant time)."""
        found = self.session(request)
        return (
            bool(given)
            and found is not None
            and secrets.compare_digest(found[1].form_token, given or "")
        )

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
