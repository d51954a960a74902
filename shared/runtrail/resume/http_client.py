"""``ServiceCacheClient``: the decorators' remote cache, over the service's HTTP lookup API.

Keep-alive connections (one per thread), a bearer token for the tenant, and every failure —
refused connection, timeout, 5xx, 401 — raised as :class:`CacheUnavailable`, which the
:class:`~runtrail.resume.cache.ResumeCache` turns into an untrusted miss. 503 is the service
saying it has not consumed as far as the lookup asked (:class:`NotCaughtUp`).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Mapping
from typing import Any, Unpack
from urllib.parse import quote, urlencode, urlsplit

import orjson

from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.errors import CacheUnavailable, NotCaughtUp
from runtrail.resume.remote import Ask, Lookup, format_offsets


class ServiceCacheClient:
    """A :class:`~runtrail.resume.remote.CacheSource` backed by ``runtrail run resume-cache``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        wait_ms: int = 10_000,
        timeout_s: float = 5.0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http(s)://host:port, got {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self.wait_ms = wait_ms
        self.timeout_s = timeout_s
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            timeout = self.timeout_s + self.wait_ms / 1000
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=timeout)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _get(self, path: str, params: Mapping[str, str]) -> tuple[int, Any]:
        query = urlencode({k: v for k, v in params.items() if v})
        target = f"{self._prefix}{path}" + (f"?{query}" if query else "")
        headers = {"Authorization": f"Bearer {self._token}", "Connection": "keep-alive"}
        for attempt in range(2):  # a kept-alive connection the server closed: retry once
            conn = self._connection()
            try:
                conn.request("GET", target, headers=headers)
                response = conn.getresponse()
                body = response.read()
                status = response.status
                if response.getheader("Connection", "").lower() == "close":
                    self._drop()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._drop()
                if attempt:
                    raise CacheUnavailable(f"resume-cache service: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise CacheUnavailable(f"resume-cache service unreachable: {exc}") from exc
        try:
            payload = orjson.loads(body) if body else None
        except orjson.JSONDecodeError as exc:
            raise CacheUnavailable(f"resume-cache service answered {status} with non-JSON") from exc
        if status == 503:
            raise NotCaughtUp(str((payload or {}).get("detail") or "service not caught up"))
        if status == 401:
            raise CacheUnavailable("resume-cache service refused the token (401)")
        if status not in (200, 404):
            raise CacheUnavailable(f"resume-cache service answered {status}: {payload}")
        return status, payload

    def lookup(self, **ask: Unpack[Ask]) -> Lookup:
        status, payload = self._get(
            f"/v1/tenants/{quote(ask['tenant'], safe='')}/entries/{ask['kind'].value}/{ask['key']}",
            {
                "run": ask["run_id"],
                "scope": ask["scope"].value,
                "offsets": format_offsets(ask["min_offsets"]),
                "wait_ms": str(self.wait_ms),
            },
        )
        try:
            if status == 200:
                return Lookup(CacheEntry.from_json(payload["entry"]))
            intent = (payload or {}).get("intent")
            return Lookup(None, Intent.from_json(intent) if intent else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise CacheUnavailable(
                f"unexpected answer from the resume-cache service: {exc}"
            ) from exc

    def run_state(self, *, tenant: str, run_id: str, min_offsets: Mapping[int, int]) -> RunState:
        status, payload = self._get(
            f"/v1/tenants/{quote(tenant, safe='')}/runs/{quote(run_id, safe='')}",
            {"offsets": format_offsets(min_offsets), "wait_ms": str(self.wait_ms)},
        )
        if status != 200:
            raise CacheUnavailable(f"resume-cache service answered {status} for run {run_id!r}")
        try:
            return RunState.from_json(payload)
        except ValueError as exc:
            raise CacheUnavailable(f"unexpected run state: {exc}") from exc

    def close(self) -> None:
        self._drop()
