"""The commands of seed 002 and the events each one appends.

A command is turned into event *drafts* (type, version, payload) here; whether they may follow
the run's state is decided by the projector's own transition table
(:func:`runtrail.projection.apply_event`), applied by the store inside its transaction — there
is no second copy of the rules. What a command checks itself is only what no event rule can:
``deny_approval`` names the pending action it refuses, and after a cancellation request only
the commands that wind a run down are taken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from runtrail.events.models import CURRENT_VERSIONS, data_model
from runtrail.projection.model import RunProjection
from runtrail.projection.projector import RULES


class Refused(Exception):
    """A command or a resume that cannot be carried out: a ``code`` the API and the CLI answer
    with, and a ``reason`` for people."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class CommandRejected(Refused):
    """The command itself is wrong (unknown, malformed, or refused by its own precondition)."""


@dataclass(frozen=True, slots=True)
class Draft:
    """An event to append: its type, schema version and validated JSON payload."""

    type: str
    version: int
    data: dict[str, Any]


Builder = Callable[[RunProjection | None, Mapping[str, Any]], list[tuple[str, dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One command: the event types it may append, and how its data becomes their payloads."""

    name: str
    summary: str
    event_types: tuple[str, ...]
    build: Builder
    #: Taken after a cancellation was requested (the commands that wind a run down).
    while_cancelling: bool = False


def _same(event_type: str) -> Builder:
    return lambda state, data: [(event_type, dict(data))]


def _deny(state: RunProjection | None, data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    digest = data.get("actionDigest")
    pending = state.pending_action_digest if state is not None else None
    if pending is None:
        raise CommandRejected("invalid-transition", "no approval is pending: nothing to deny")
    if digest != pending:
        raise CommandRejected(
            "invalid-transition", f"deny names action {digest!r} but the pending one is {pending}"
        )
    by = data.get("deniedBy") or "unknown"
    why = f": {data['reason']}" if data.get("reason") else ""
    return [("run.failed", {"reason": f"approval of {pending} denied by {by}{why}"})]


_OUTCOMES = {
    "succeeded": "tool.invocation_succeeded",
    "failed": "tool.invocation_failed",
    "uncertain": "tool.invocation_uncertain",
}


def _tool_outcome(
    state: RunProjection | None, data: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    payload = dict(data)
    outcome = payload.pop("outcome", None)
    if outcome not in _OUTCOMES:
        raise CommandRejected(
            "invalid-command", f"outcome must be one of {sorted(_OUTCOMES)}, not {outcome!r}"
        )
    return [(_OUTCOMES[outcome], payload)]


_SPECS = (
    CommandSpec("accept_run", "open a run", ("run.accepted",), _same("run.accepted")),
    CommandSpec(
        "propose_plan", "propose a plan", ("run.plan_proposed",), _same("run.plan_proposed")
    ),
    CommandSpec(
        "validate_plan",
        "validate the proposed plan",
        ("run.plan_validated",),
        _same("run.plan_validated"),
    ),
    CommandSpec(
        "require_approval",
        "wait for an approval",
        ("run.approval_required",),
        _same("run.approval_required"),
    ),
    CommandSpec(
        "grant_approval",
        "approve the pending action",
        ("run.approval_granted",),
        _same("run.approval_granted"),
    ),
    CommandSpec(
        "deny_approval", "refuse the pending action (the run fails)", ("run.failed",), _deny
    ),
    CommandSpec(
        "require_input", "wait for input", ("run.input_required",), _same("run.input_required")
    ),
    CommandSpec(
        "provide_input",
        "answer the pending input request",
        ("run.input_received",),
        _same("run.input_received"),
    ),
    CommandSpec(
        "request_cancellation",
        "ask the run to stop",
        ("run.cancellation_requested",),
        _same("run.cancellation_requested"),
    ),
    CommandSpec(
        "acknowledge_cancellation",
        "the run stopped (cancelled)",
        ("run.cancellation_acknowledged",),
        _same("run.cancellation_acknowledged"),
        while_cancelling=True,
    ),
    CommandSpec(
        "record_tool_intent",
        "a tool invocation is about to run",
        ("tool.invocation_requested",),
        _same("tool.invocation_requested"),
    ),
    CommandSpec(
        "record_tool_start",
        "the tool invocation started",
        ("tool.invocation_started",),
        _same("tool.invocation_started"),
        while_cancelling=True,
    ),
    CommandSpec(
        "record_tool_outcome",
        "what the tool invocation did (outcome: succeeded, failed, uncertain)",
        tuple(_OUTCOMES.values()),
        _tool_outcome,
        while_cancelling=True,
    ),
    CommandSpec("reserve_budget", "reserve budget", ("budget.reserved",), _same("budget.reserved")),
    CommandSpec(
        "commit_budget",
        "commit reserved budget",
        ("budget.committed",),
        _same("budget.committed"),
        while_cancelling=True,
    ),
    CommandSpec(
        "release_budget",
        "release reserved budget",
        ("budget.released",),
        _same("budget.released"),
        while_cancelling=True,
    ),
    CommandSpec("complete_run", "the run succeeded", ("run.succeeded",), _same("run.succeeded")),
    CommandSpec(
        "fail_run", "the run failed", ("run.failed",), _same("run.failed"), while_cancelling=True
    ),
)

#: command name -> its spec.
COMMANDS: dict[str, CommandSpec] = {spec.name: spec for spec in _SPECS}


def spec_of(name: str) -> CommandSpec:
    try:
        return COMMANDS[name]
    except KeyError:
        raise CommandRejected(
            "unknown-command", f"unknown command {name!r} (known: {', '.join(sorted(COMMANDS))})"
        ) from None


def drafts(name: str, state: RunProjection | None, data: Mapping[str, Any]) -> list[Draft]:
    """The events ``name`` appends to ``state``, payloads validated by their current models."""
    spec = spec_of(name)
    if state is not None and state.cancellation_requested and not spec.while_cancelling:
        raise CommandRejected(
            "cancellation-requested",
            f"cancellation of the run was requested; {name} is not taken any more (only "
            + ", ".join(sorted(s.name for s in _SPECS if s.while_cancelling))
            + ")",
        )
    out = []
    for event_type, payload in spec.build(state, data):
        version = CURRENT_VERSIONS[event_type]
        model = data_model(event_type, version)
        try:
            valid = model.model_validate(payload)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'data'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise CommandRejected("invalid-command", f"{name}: {problems}") from None
        out.append(Draft(event_type, version, valid.model_dump(mode="json", by_alias=True)))
    return out


def allowed_commands(state: RunProjection) -> list[str]:
    """Commands whose events the projector's table allows from ``state`` (a resume's menu)."""
    if state.terminal:
        return []
    names = []
    for spec in _SPECS:
        if state.cancellation_requested and not spec.while_cancelling:
            continue
        if spec.name == "deny_approval" and state.pending_action_digest is None:
            continue
        if (
            any(state.status in RULES[(t, CURRENT_VERSIONS[t])].allowed for t in spec.event_types)
            and spec.name != "accept_run"
        ):
            names.append(spec.name)
    return names
