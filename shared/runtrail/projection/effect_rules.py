"""Handlers of recorded effects: tool intents and outcomes, budgets, artifacts, model operations.

Intents and outcomes are kept apart so a resume can find what is unfinished: an intent is
requested or started; its outcome is succeeded, failed or uncertain. An uncertain outcome
moves an executing run to ``reconciling``; when the last uncertain one is resolved (a later
succeeded or failed outcome for the same invocation), the run goes back to ``executing``.
"""

from __future__ import annotations

from typing import Any, Literal

from runtrail.events import Event
from runtrail.events.domain_events import (
    ArtifactStored,
    BudgetCommitted,
    BudgetExhausted,
    BudgetReleased,
    BudgetReserved,
    ModelOperationCompleted,
    SessionSnapshot,
    ToolInvocationFailed,
    ToolInvocationRequested,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    ToolInvocationUncertain,
)
from runtrail.projection.errors import InvalidTransition
from runtrail.projection.model import (
    LIVE,
    BudgetLine,
    RunProjection,
    RunStatus,
    TokenTotals,
    ToolIntent,
    ToolOutcome,
)
from runtrail.projection.redaction import clear, clear_optional
from runtrail.projection.rule import LIVE_NEEDS, Rule, Update

Outcome = Literal["succeeded", "failed", "uncertain"]


# --- tool intents and outcomes -----------------------------------------------------------------
def tool_requested(state: RunProjection, event: Event, data: ToolInvocationRequested) -> Update:
    invocation = clear(event, "invocationId", data.invocation_id)
    if invocation in state.tool_intents or invocation in state.tool_outcomes:
        raise InvalidTransition(f"invocation {invocation} was already requested", event=event)
    intent = ToolIntent(
        tool_name=clear(event, "toolName", data.tool_name),
        idempotency_key=clear_optional(event, "idempotencyKey", data.idempotency_key),
    )
    return {"tool_intents": {**state.tool_intents, invocation: intent}}


def tool_started(state: RunProjection, event: Event, data: ToolInvocationStarted) -> Update:
    invocation = clear(event, "invocationId", data.invocation_id)
    intent = state.tool_intents.get(invocation)
    if intent is None:
        done = state.tool_outcomes.get(invocation)
        what = f"already {done.outcome}" if done else "never requested"
        raise InvalidTransition(f"invocation {invocation} started but was {what}", event=event)
    if intent.state == "started":
        raise InvalidTransition(f"invocation {invocation} was already started", event=event)
    started = intent.model_copy(update={"state": "started"})
    return {"tool_intents": {**state.tool_intents, invocation: started}}


def tool_succeeded(state: RunProjection, event: Event, data: ToolInvocationSucceeded) -> Update:
    digest = clear_optional(event, "resultDigest", data.result_digest)
    return _outcome(state, event, data.invocation_id, "succeeded", result_digest=digest)


def tool_failed(state: RunProjection, event: Event, data: ToolInvocationFailed) -> Update:
    return _outcome(state, event, data.invocation_id, "failed", error=data.error)


def tool_uncertain(state: RunProjection, event: Event, data: ToolInvocationUncertain) -> Update:
    return _outcome(state, event, data.invocation_id, "uncertain", reason=data.reason)


def _outcome(
    state: RunProjection,
    event: Event,
    invocation_id: str,
    outcome: Outcome,
    *,
    result_digest: str | None = None,
    error: str | None = None,
    reason: str | None = None,
) -> Update:
    """Record an outcome: first for a pending intent, or resolving an uncertain one."""
    invocation = clear(event, "invocationId", invocation_id)
    intent = state.tool_intents.get(invocation)
    previous = state.tool_outcomes.get(invocation)
    if intent is None and previous is None:
        raise InvalidTransition(
            f"{outcome} outcome for unknown invocation {invocation}", event=event
        )
    resolves = previous is not None and previous.outcome == "uncertain" and outcome != "uncertain"
    if previous is not None and not resolves:
        raise InvalidTransition(
            f"invocation {invocation} is already {previous.outcome}; got {outcome}", event=event
        )
    origin = intent if intent is not None else previous
    assert origin is not None  # one of them exists (checked above)
    recorded = ToolOutcome(
        tool_name=origin.tool_name,
        idempotency_key=origin.idempotency_key,
        outcome=outcome,
        result_digest=result_digest,
        error=error,
        reason=reason,
        reconciled=resolves,
    )
    outcomes = {**state.tool_outcomes, invocation: recorded}
    update: Update = {
        "tool_intents": {k: v for k, v in state.tool_intents.items() if k != invocation},
        "tool_outcomes": outcomes,
    }
    if outcome == "uncertain":
        update.update(_shift(state, "executing", "reconciling"))
    elif resolves and not any(o.outcome == "uncertain" for o in outcomes.values()):
        update.update(_shift(state, "reconciling", "executing"))
    return update


def _shift(state: RunProjection, source: RunStatus, target: RunStatus) -> Update:
    """Move ``source`` to ``target`` in the status, or in the status a pending wait returns to."""
    if state.status == source:
        return {"status": target}
    if state.resume_status == source:
        return {"resume_status": target}
    return {}


# --- budgets ---------------------------------------------------------------------------------
def _budget(state: RunProjection, event: Event, budget_id: str, unit: str) -> BudgetLine | None:
    key = clear(event, "budgetId", budget_id)
    line = state.budgets.get(key)
    unit = clear(event, "unit", unit)
    if line is not None and line.unit != unit:
        raise InvalidTransition(f"budget {key} is counted in {line.unit}, not {unit}", event=event)
    return line


def budget_reserved(state: RunProjection, event: Event, data: BudgetReserved) -> Update:
    line = _budget(state, event, data.budget_id, data.unit) or BudgetLine(unit=data.unit)
    line = line.model_copy(update={"reserved": line.reserved + data.amount})
    return {"budgets": {**state.budgets, data.budget_id: line}}


def budget_committed(state: RunProjection, event: Event, data: BudgetCommitted) -> Update:
    line = _reserved_line(state, event, data.budget_id, data.unit, "committed")
    line = line.model_copy(update={"committed": line.committed + data.amount})
    return {"budgets": {**state.budgets, data.budget_id: line}}


def budget_released(state: RunProjection, event: Event, data: BudgetReleased) -> Update:
    line = _reserved_line(state, event, data.budget_id, data.unit, "released")
    line = line.model_copy(update={"released": line.released + data.amount})
    return {"budgets": {**state.budgets, data.budget_id: line}}


def _reserved_line(
    state: RunProjection, event: Event, budget_id: str, unit: str, verb: str
) -> BudgetLine:
    line = _budget(state, event, budget_id, unit)
    if line is None:
        raise InvalidTransition(f"budget {budget_id} {verb} but never reserved", event=event)
    return line


def budget_exhausted(state: RunProjection, event: Event, data: BudgetExhausted) -> Update:
    """Exhaustion may be the first word on a budget (a limit reached before any reservation)."""
    line = _budget(state, event, data.budget_id, data.unit) or BudgetLine(unit=data.unit)
    line = line.model_copy(update={"exhausted": True})
    return {"budgets": {**state.budgets, data.budget_id: line}}


# --- artifacts, model operations, session checkpoints -------------------------------------------
def artifact_stored(state: RunProjection, event: Event, data: ArtifactStored) -> Update:
    artifact = clear(event, "artifactId", data.artifact_id)
    digest = clear(event, "digest", data.digest)
    known = state.artifacts.get(artifact)
    proposed = state.proposed_plan
    if proposed is not None and proposed.artifact_id == artifact and proposed.digest is not None:
        known = known or proposed.digest
    if known is not None and known != digest:
        raise InvalidTransition(
            f"artifact {artifact} has digest {known}; a second one ({digest}) would rewrite it",
            event=event,
        )
    return {"artifacts": {**state.artifacts, artifact: digest}}


def model_completed(state: RunProjection, event: Event, data: ModelOperationCompleted) -> Update:
    tokens = state.tokens
    return {
        "model_operations": state.model_operations + 1,
        "tokens": TokenTotals.of(
            tokens.input_tokens + (data.input_tokens or 0),
            tokens.output_tokens + (data.output_tokens or 0),
        ),
    }


def session_snapshot(state: RunProjection, event: Event, data: SessionSnapshot) -> Update:
    """Only the fact is projected; the checkpoint itself belongs to the sessions service."""
    return {"session_snapshot_sequence": event.sequence}


#: The recorded effects' rows of the projector's table
#: (:data:`~runtrail.projection.projector.RULES`): each applies to a run that has not ended.
RULES: dict[tuple[str, int], Rule[Any]] = {
    ("tool.invocation_requested", 1): Rule(
        ToolInvocationRequested, tool_requested, LIVE, LIVE_NEEDS
    ),
    ("tool.invocation_started", 1): Rule(ToolInvocationStarted, tool_started, LIVE, LIVE_NEEDS),
    ("tool.invocation_succeeded", 1): Rule(
        ToolInvocationSucceeded, tool_succeeded, LIVE, LIVE_NEEDS
    ),
    ("tool.invocation_failed", 1): Rule(ToolInvocationFailed, tool_failed, LIVE, LIVE_NEEDS),
    ("tool.invocation_uncertain", 1): Rule(
        ToolInvocationUncertain, tool_uncertain, LIVE, LIVE_NEEDS
    ),
    ("model.operation_completed", 1): Rule(
        ModelOperationCompleted, model_completed, LIVE, LIVE_NEEDS
    ),
    ("artifact.stored", 1): Rule(ArtifactStored, artifact_stored, LIVE, LIVE_NEEDS),
    ("budget.reserved", 1): Rule(BudgetReserved, budget_reserved, LIVE, LIVE_NEEDS),
    ("budget.committed", 1): Rule(BudgetCommitted, budget_committed, LIVE, LIVE_NEEDS),
    ("budget.released", 1): Rule(BudgetReleased, budget_released, LIVE, LIVE_NEEDS),
    ("budget.exhausted", 1): Rule(BudgetExhausted, budget_exhausted, LIVE, LIVE_NEEDS),
    ("session.snapshot", 1): Rule(SessionSnapshot, session_snapshot, LIVE, LIVE_NEEDS),
}
