"""A Python client of the command API (standard library only, so an agent needs no extra).

Every call names a run of the token's tenant. :meth:`CommandClient.send` returns the store's
:class:`~runtrail.commands.model.CommandOutcome` for accepted *and* refused commands (a stale
version, an invalid transition): refusals are answers, not errors. :class:`CommandApiError`
is raised only when there is no answer to give (no token, a malformed request, no server).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from runtrail.commands.model import CommandOutcome


class CommandApiError(Exception):
    """The API gave no outcome: unreachable, unauthorized or a malformed request."""

    def __init__(self, status: int | None, reason: str) -> None:
        super().__init__(f"{status or 'no answer'}: {reason}")
        self.status = status
        self.reason = reason


class CommandClient:
    """The command API at ``base_url`` (e.g. ``http://127.0.0.1:8470``) with a tenant token."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return int(response.status), json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return int(exc.code), json.loads(text)
            except ValueError:
                raise CommandApiError(exc.code, text.decode(errors="replace")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise CommandApiError(None, f"{self.base_url}: {exc}") from None

    @staticmethod
    def _run_path(run_id: str) -> str:
        return "/v1/runs/" + urllib.parse.quote(run_id, safe="")

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The run's version, status, projection and allowed commands; None if there is none."""
        status, body = self._call("GET", self._run_path(run_id))
        if status == 404:
            return None
        if status != 200:
            raise CommandApiError(status, str(body))
        return dict(body)

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        status, body = self._call("GET", f"{self._run_path(run_id)}/events?after={after}")
        if status != 200:
            raise CommandApiError(status, str(body))
        return list(body["events"])

    def send(
        self,
        run_id: str,
        name: str,
        data: dict[str, Any] | None = None,
        *,
        expected_version: int,
        idempotency_key: str | None = None,
        actor: dict[str, str] | None = None,
    ) -> CommandOutcome:
        """Send one command; its outcome, accepted or refused."""
        body: dict[str, Any] = {
            "name": name,
            "expectedVersion": expected_version,
            "idempotencyKey": idempotency_key or str(uuid.uuid4()),
            "data": data or {},
        }
        if actor is not None:
            body["actor"] = actor
        status, answer = self._call("POST", f"{self._run_path(run_id)}/commands", body)
        if status in (200, 409, 422) and isinstance(answer, dict) and "accepted" in answer:
            return CommandOutcome.model_validate(answer)
        raise CommandApiError(status, str(answer))

    def current_version(self, run_id: str) -> int:
        found = self.run(run_id)
        return int(found["version"]) if found else 0

    def approve(
        self,
        run_id: str,
        action_digest: str,
        approved_by: str,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> CommandOutcome:
        """Grant the pending approval (at the version observed now, unless one is given)."""
        return self._as_operator(
            approved_by,
            run_id,
            "grant_approval",
            {"actionDigest": action_digest, "approvedBy": approved_by},
            expected_version,
            idempotency_key,
        )

    def cancel(
        self,
        run_id: str,
        requested_by: str,
        reason: str | None = None,
        *,
        expected_version: int | None = None,
    ) -> CommandOutcome:
        return self._as_operator(
            requested_by,
            run_id,
            "request_cancellation",
            {"requestedBy": requested_by, "reason": reason},
            expected_version,
        )

    def _as_operator(
        self,
        operator: str,
        run_id: str,
        name: str,
        data: dict[str, Any],
        expected_version: int | None,
        idempotency_key: str | None = None,
    ) -> CommandOutcome:
        """A command sent by ``operator``, at ``expected_version`` or else the version observed
        now."""
        version = self.current_version(run_id) if expected_version is None else expected_version
        return self.send(
            run_id,
            name,
            data,
            expected_version=version,
            idempotency_key=idempotency_key,
            actor={"kind": "operator", "id": operator},
        )

    def resume(self, run_id: str) -> dict[str, Any]:
        """The resume protocol on the server (no reconcile hooks there: unresolved ones stay)."""
        status, body = self._call("POST", f"{self._run_path(run_id)}/resume", {})
        if status != 200:
            raise CommandApiError(
                status, str(body.get("reason") if isinstance(body, dict) else body)
            )
        return dict(body)
