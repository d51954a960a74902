"""Who is asking: the per-tenant bearer token, from the login cookie or an ``Authorization``
header, mapped to a tenant by the same :class:`TokenAuth` every runtrail API uses.

The cookie is HttpOnly (no script reads the token) and SameSite=Strict (no other site's page
can post with it). The tenant comes from the token alone; nothing in a URL can name another,
so another tenant's run answers 404, exactly like a run that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

from runtrail.http_server import TokenAuth

COOKIE = "runtrail_token"


class Auth:
    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._auth = TokenAuth(tokens)

    def tenant_of_token(self, token: str) -> str | None:
        return self._auth.tenant_of(f"Bearer {token}") if token.strip() else None

    def tenant(self, request: Request) -> str | None:
        header = request.headers.get("authorization")
        if header:
            return self._auth.tenant_of(header)
        token = request.cookies.get(COOKIE)
        return self.tenant_of_token(token) if token else None


def set_login(response: Response, token: str, secure: bool) -> None:
    response.set_cookie(
        COOKIE, token, httponly=True, samesite="strict", secure=secure, path="/", max_age=43200
    )


def clear_login(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")
