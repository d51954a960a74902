"""Approve, deny and request cancellation from a run's page: through the command API, with the
signed-in tenant's token, at the version the page observed, exactly as ``runtrail command``
sends them (:mod:`runtrail_tools.cli.command_cmd`).

The page reads the run from the command API when it renders (its version, pending digest and
allowed commands, what ``runtrail command show`` prints) and its form carries that version:
if the run moved since, the command API refuses it as stale, and the page says so in the
words the CLI prints (``refused (stale): …``). Nothing here decides what is allowed: the
command API does, for the page as for the CLI.

Outcomes are shown once on the page the browser is sent back to (post, redirect, get), kept
per session in memory until then.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtrail.commands.client import CommandApiError, CommandClient
from runtrail.commands.model import CommandOutcome

#: The page's verbs: the CLI's verb, the command it sends, the button's words.
VERBS: Mapping[str, tuple[str, str]] = {
    "approve": ("grant_approval", "approve"),
    "deny": ("deny_approval", "deny"),
    "cancel": ("request_cancellation", "request cancellation"),
}
#: Most outcomes kept for pages not reloaded yet (oldest dropped first).
MAX_NOTICES = 1000


@dataclass(frozen=True, slots=True)
class Observed:
    """The run as the command API showed it when the page rendered."""

    version: int
    status: str
    digest: str | None
    allowed: frozenset[str]


@dataclass(frozen=True, slots=True)
class Notice:
    """What became of a command sent from the page, in the CLI's words."""

    accepted: bool
    text: str
    answer: dict[str, Any] | None


def outcome_text(outcome: CommandOutcome) -> str:
    """The line ``runtrail command`` prints for an outcome (stderr for a refusal)."""
    if outcome.accepted:
        again = " (a duplicate: the first outcome)" if outcome.duplicate else ""
        return f"accepted at version {outcome.version}{again}"
    return f"refused ({outcome.code}): {outcome.reason}"


def cli_command(
    verb: str, run_id: str, url: str, observed: Observed, by: str, reason: str | None = None
) -> str:
    """The same command for a shell (its token from ``RUNTRAIL_COMMAND_TOKEN``, never shown)."""
    argv = ["runtrail", "command", verb, run_id, "--url", url]
    argv += ["--expected-version", str(observed.version), "--by", by]
    if verb in ("approve", "deny") and observed.digest:
        argv += ["--digest", observed.digest]
    if reason and verb in ("deny", "cancel"):
        argv += ["--reason", reason]
    return " ".join(shlex.quote(a) for a in argv)


class Actions:
    """The command API as the explorer's signed-in tenants use it."""

    def __init__(self, url: str | None, tokens: Mapping[str, str]) -> None:
        self.url = url.rstrip("/") if url else None
        self._tokens = dict(tokens)
        self._notices: dict[tuple[str, str], Notice] = {}
        self._lock = threading.Lock()

    def client(self, tenant: str) -> CommandClient | None:
        token = self._tokens.get(tenant)
        return CommandClient(self.url, token, timeout_s=5.0) if self.url and token else None

    def observe(self, tenant: str, run_id: str) -> Observed | str | None:
        """The run in the command API; None when it has no such run (not command-driven),
        the reason as text when the API cannot be asked."""
        client = self.client(tenant)
        if client is None:
            return "no command API configured (--command-url)"
        try:
            found = client.run(run_id)
        except (CommandApiError, OSError) as exc:
            return f"the command API did not answer: {exc}"
        if found is None:
            return None
        state = found.get("state") or {}
        return Observed(
            int(found["version"]),
            str(found.get("status") or ""),
            state.get("pendingActionDigest"),
            frozenset(found.get("allowedCommands") or ()),
        )

    def send(
        self,
        tenant: str,
        run_id: str,
        verb: str,
        version: int,
        by: str,
        digest: str | None,
        reason: str | None,
    ) -> Notice:
        """One command, as ``runtrail command VERB`` sends it."""
        client = self.client(tenant)
        if client is None:
            return Notice(False, "no command API configured (--command-url)", None)
        try:
            if verb == "approve":
                if not digest:
                    return Notice(False, f"run {run_id} has no pending approval", None)
                outcome = client.approve(run_id, digest, by, expected_version=version)
            elif verb == "deny":
                data = {"actionDigest": digest, "deniedBy": by, "reason": reason}
                actor = {"kind": "operator", "id": by}
                outcome = client.send(
                    run_id, "deny_approval", data, expected_version=version, actor=actor
                )
            else:
                outcome = client.cancel(run_id, by, reason, expected_version=version)
        except (CommandApiError, OSError) as exc:
            return Notice(False, f"runtrail command: {exc}", None)
        return Notice(
            outcome.accepted, outcome_text(outcome), outcome.model_dump(mode="json", by_alias=True)
        )

    def keep(self, session: str, run_id: str, notice: Notice) -> None:
        with self._lock:
            while len(self._notices) >= MAX_NOTICES:
                self._notices.pop(next(iter(self._notices)))
            self._notices[(session, run_id)] = notice

    def take(self, session: str, run_id: str) -> Notice | None:
        with self._lock:
            return self._notices.pop((session, run_id), None)
