"""What every response of the explorer carries, and which requests it answers at all.

Headers: a Content-Security-Policy that lets the page run only the package's own script and
stylesheet (every value is escaped server-side; the policy stops what an escaping slip would
let in), no framing (``frame-ancestors`` and ``X-Frame-Options``, against clickjacking of the
approve and verify buttons), ``nosniff`` (a JSON or JSONL download is never run as a script)
and no referrer (run IDs stay out of other sites' logs).

Host: a request whose ``Host`` is not a name of the bound address is refused (400) before any
route runs, so a page on another site that rebinds its DNS name to 127.0.0.1 cannot read the
explorer through the browser of someone signed in to it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The host names a request may carry for an explorer bound to ``bound``; None (any) for
    a wildcard bind with no names given, where the address says nothing about the name."""
    names = {name.strip().lower().strip("[]") for name in extra if name.strip()}
    host = bound.strip().strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return frozenset(names | {host.lower()})
    if address.is_unspecified:
        return frozenset(names) if names else None
    if address.is_loopback:
        names.update(LOOPBACK_NAMES)
    names.add(address.compressed)
    return frozenset(names)


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header (``[::1]:9480`` → ``::1``), None if it has none."""
    try:
        name = urlsplit(f"//{header}").hostname
    except ValueError:
        return None
    return name or None


class Guard:
    """ASGI middleware: the host check, then the security headers on every response."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.hosts is not None:
            name = host_name(Headers(scope=scope).get("host", ""))
            if name is None or name not in self.hosts:
                refused = PlainTextResponse("this host name is not served here\n", 400)
                await refused(scope, receive, self._with_headers(send))
                return
        await self.app(scope, receive, self._with_headers(send))

    @staticmethod
    def _with_headers(send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        return sending
