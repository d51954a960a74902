"""The resume protocol of seed 002 ("Resume from state, not from the last sentence").

:func:`resume_run` on a command store, after a crash:

1. load the latest snapshot and **verify** it (digest, projector version, sequence); one that
   cannot be trusted is reported and ignored (the run is rebuilt from its first event);
2. replay the events after it, in sequence, through the projector — nothing is executed; the
   rebuilt state must equal the store's online projection, else the resume is refused;
3. find nonterminal intents: tool invocations requested or started without an outcome, and
   outcomes recorded ``uncertain``;
4. reconcile each through the **reconcile hook of its tool** (``reconcilers[toolName]``), which
   asks the external system what happened (it never performs the operation): a known outcome
   is recorded as ``tool.invocation_succeeded`` / ``failed``; an intent whose outcome nobody
   can tell is recorded ``uncertain`` (the run goes to ``reconciling``) and stays unresolved;
5. re-establish what the run waits for: a pending approval (and its ``expiresAt`` timer —
   reported expired when the clock is past it), a pending input request;
6. hand back only the commands allowed from the reconstructed state (while invocations are
   unresolved, only those that resolve or wind the run down).

Cancelled and terminal runs cannot resume (:class:`ResumeRefused`), nor a run whose stored
events the projector cannot interpret (an unknown event version stops it, never guessed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from runtrail.camel_json import camel_fields
from runtrail.commands.catalog import Refused, allowed_commands
from runtrail.commands.model import Command
from runtrail.commands.store import EventStore
from runtrail.events import Actor, EventError
from runtrail.instants import utc_instant
from runtrail.projection.errors import ProjectionError, SnapshotMismatch
from runtrail.projection.model import RunProjection
from runtrail.projection.replaying import replay

#: Commands still offered while an invocation's outcome is unknown.
WHILE_UNRESOLVED = frozenset(
    {"record_tool_outcome", "fail_run", "request_cancellation", "acknowledge_cancellation"}
)
RESUME_ACTOR = Actor(kind="service", id="runtrail-resume")


class ResumeRefused(Refused):
    """The run cannot resume (terminal, cancelled, unknown, or its projection disagrees)."""


@dataclass(frozen=True, slots=True)
class OpenInvocation:
    """What a reconcile hook is asked about."""

    tenant_id: str
    run_id: str
    invocation_id: str
    tool_name: str
    idempotency_key: str | None
    state: Literal["requested", "started", "uncertain"]


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A hook's answer: what the external system says happened."""

    outcome: Literal["succeeded", "failed"]
    result_digest: str | None = None
    error: str | None = None


#: A tool's reconcile hook: the outcome, or None when the external system cannot tell.
Reconciler = Callable[[OpenInvocation], Reconciled | None]


@dataclass
class ResumeReport:
    """What the resume found, recorded and hands back."""

    tenant_id: str
    run_id: str
    version: int
    status: str
    snapshot_sequence: int | None
    snapshot_refused: str | None
    replayed: int
    reconciled: list[dict[str, Any]] = field(default_factory=list)
    unresolved: list[dict[str, Any]] = field(default_factory=list)
    pending_approval: dict[str, Any] | None = None
    pending_input: dict[str, Any] | None = None
    timers: list[dict[str, Any]] = field(default_factory=list)
    allowed_commands: list[str] = field(default_factory=list)

    def json_form(self) -> dict[str, Any]:
        return camel_fields(self)


@dataclass(frozen=True, slots=True)
class Rebuilt:
    state: RunProjection | None
    snapshot_sequence: int | None
    snapshot_refused: str | None
    replayed: int


def rebuild(store: EventStore, tenant: str, run: str) -> Rebuilt:
    """The run's projection from its latest trusted snapshot plus the tail of its events
    (steps 1 and 2): pure replay, nothing is called."""
    refused = None
    try:
        snapshot = store.latest_snapshot(tenant, run)
    except SnapshotMismatch as exc:
        snapshot, refused = None, str(exc)
    after = snapshot.last_applied_sequence if snapshot is not None else 0
    tail = store.events(tenant, run, after)
    if snapshot is None and not tail:
        return Rebuilt(None, None, refused, 0)
    state = replay(tail, snapshot)
    return Rebuilt(state, after if snapshot is not None else None, refused, len(tail))


def resume_run(
    store: EventStore,
    tenant: str,
    run: str,
    *,
    reconcilers: Mapping[str, Reconciler] | None = None,
    now: datetime | None = None,
    actor: Actor = RESUME_ACTOR,
) -> ResumeReport:
    """Resume ``run`` (see the module docstring); :class:`ResumeRefused` if it cannot."""
    version, online = store.load(tenant, run)
    if online is None:
        raise ResumeRefused("not-found", f"no run {run} for tenant {tenant}")
    try:
        rebuilt = rebuild(store, tenant, run)
    except (EventError, ProjectionError) as exc:  # an unknown version, an invalid stored event
        raise ResumeRefused(
            "projection-halted", f"the projection of {run} stops: {exc}; nothing is guessed"
        ) from exc
    state = rebuilt.state
    if state != online:
        raise ResumeRefused(
            "projection-mismatch",
            f"the rebuilt projection of {run} differs from the stored one (version "
            f"{state.version if state else 0} vs {version}): rebuild before resuming",
        )
    assert state is not None
    if state.terminal:
        code = "run-cancelled" if state.status == "cancelled" else "run-terminal"
        raise ResumeRefused(code, f"run {run} is {state.status}: a finished run never resumes")
    report = ResumeReport(
        tenant,
        run,
        version,
        state.status,
        rebuilt.snapshot_sequence,
        rebuilt.snapshot_refused,
        rebuilt.replayed,
    )
    hooks = reconcilers or {}
    for open_ in _open_invocations(state):
        hook = hooks.get(open_.tool_name)
        answer = hook(open_) if hook is not None else None
        if answer is not None:
            data: dict[str, Any] = {"invocationId": open_.invocation_id, "outcome": answer.outcome}
            if answer.outcome == "succeeded":
                data["resultDigest"] = answer.result_digest
            else:
                data["error"] = answer.error or "failed (reconciled)"
            state = _record(store, state, open_, data, actor)
            report.reconciled.append(
                {
                    "invocationId": open_.invocation_id,
                    "toolName": open_.tool_name,
                    "outcome": answer.outcome,
                }
            )
            continue
        why = "no reconcile hook" if hook is None else "the reconcile hook cannot tell"
        if open_.state != "uncertain":
            data = {
                "invocationId": open_.invocation_id,
                "outcome": "uncertain",
                "reason": f"outcome unknown at resume: {why}",
            }
            state = _record(store, state, open_, data, actor)
        report.unresolved.append(
            {"invocationId": open_.invocation_id, "toolName": open_.tool_name, "reason": why}
        )
    report.version, report.status = state.version, state.status
    clock = now or datetime.now(UTC)
    if state.pending_action_digest is not None:
        expires = state.approval_expires_at
        expired = expires is not None and clock > _parse(expires)
        report.pending_approval = {
            "actionDigest": state.pending_action_digest,
            "expiresAt": expires,
            "expired": expired,
        }
        if expires is not None:
            report.timers.append({"kind": "approval-expiry", "at": expires, "expired": expired})
    if state.pending_input is not None:
        report.pending_input = {"requestId": state.pending_input.request_id}
    allowed = allowed_commands(state)
    if report.unresolved:
        allowed = [name for name in allowed if name in WHILE_UNRESOLVED]
    if report.pending_approval and report.pending_approval["expired"]:
        allowed = [name for name in allowed if name != "grant_approval"]
    report.allowed_commands = allowed
    return report


def _open_invocations(state: RunProjection) -> list[OpenInvocation]:
    found = [
        OpenInvocation(
            state.tenant_id,
            state.run_id,
            inv,
            intent.tool_name,
            intent.idempotency_key,
            intent.state,
        )
        for inv, intent in state.tool_intents.items()
    ]
    found += [
        OpenInvocation(
            state.tenant_id,
            state.run_id,
            inv,
            outcome.tool_name,
            outcome.idempotency_key,
            "uncertain",
        )
        for inv, outcome in state.tool_outcomes.items()
        if outcome.outcome == "uncertain"
    ]
    return found


def _record(
    store: EventStore,
    state: RunProjection,
    open_: OpenInvocation,
    data: dict[str, Any],
    actor: Actor,
) -> RunProjection:
    """Record a reconciled outcome as a command (deduplicated by its idempotency key)."""
    key = f"resume:{open_.invocation_id}:{open_.state}:{data['outcome']}"
    for _ in range(3):
        outcome = store.execute(
            Command(
                name="record_tool_outcome",
                tenant_id=state.tenant_id,
                run_id=state.run_id,
                expected_version=state.version,
                idempotency_key=key,
                actor=actor,
                data=data,
            )
        )
        _, reloaded = store.load(state.tenant_id, state.run_id)
        assert reloaded is not None
        if outcome.accepted:
            return reloaded
        if not outcome.stale:
            raise ResumeRefused(outcome.code, outcome.reason or outcome.code)
        state = reloaded
    raise ResumeRefused("stale", f"run {state.run_id} keeps changing while it is resumed")


def _parse(text: str) -> datetime:
    value = utc_instant(text)
    if value is None:
        raise ValueError(f"not an ISO-8601 time: {text!r}")
    return value
