"""Handlers of the run's lifecycle: acceptance, plan, approval, input, transitions, the end.

Each handler returns the fields it changes; :data:`RULES` gives the statuses each one may apply
in (the transition table in :mod:`runtrail.projection.projector` says what each does).
"""

from __future__ import annotations

from typing import Any

from runtrail.events import Event
from runtrail.events.domain_events import (
    ApprovalGranted,
    ApprovalRequired,
    ApprovalRequiredV1,
    CancellationAcknowledged,
    CancellationRequested,
    ContentErased,
    InputReceived,
    InputReceivedV1,
    InputRequired,
    InputRequiredV1,
    PlanProposed,
    PlanValidated,
    RunAccepted,
    RunBranched,
    RunFailed,
    RunResumed,
    RunSucceeded,
    StateTransitioned,
)
from runtrail.projection.errors import InvalidTransition
from runtrail.projection.model import (
    ACTIVE,
    LIVE,
    TERMINAL,
    WAITING,
    PendingInput,
    ProposedPlan,
    Resume,
    RunProjection,
)
from runtrail.projection.names import utc_text
from runtrail.projection.redaction import clear, clear_optional
from runtrail.projection.rule import ACTIVE_NEEDS, LIVE_NEEDS, Rule, Update, as_current, instant


def accepted_again(state: RunProjection, event: Event, data: RunAccepted) -> Update:
    raise InvalidTransition(
        f"run already exists (opened by a {state.origin} event, status {state.status}); "
        "run.accepted can only be a run's first event",
        event=event,
    )


def branched(state: RunProjection, event: Event, data: RunBranched) -> Update:
    """Lineage is said once, at the start: a second run.branched would rewrite it."""
    if state.parent_run_id is not None or state.branched_from is not None:
        raise InvalidTransition("the run's lineage is already recorded", event=event)
    parent = clear_optional(event, "parentRunId", data.parent_run_id)
    return {"parent_run_id": parent, "branched_from": data.branched_from}


def resumed(state: RunProjection, event: Event, data: RunResumed) -> Update:
    """The run goes on as it stood (status unchanged); the resume is counted and the latest
    kept. The earlier life it follows must be behind it in the run's sequence."""
    if data.after_sequence is not None and data.after_sequence >= event.sequence:
        raise InvalidTransition(
            f"afterSequence {data.after_sequence} is not before the resume's own sequence",
            event=event,
        )
    resume = Resume(
        sequence=event.sequence,
        occurred_at=utc_text(event.occurred_at),
        host=data.host,
        pid=data.pid,
        previous_process=data.previous_process,
        after_sequence=data.after_sequence,
        at_step=data.at_step,
        cached_steps=data.cached_steps,
        cache_hits=data.cache_hits,
    )
    return {"resumes": state.resumes + 1, "last_resume": resume}


def plan_proposed(state: RunProjection, event: Event, data: PlanProposed) -> Update:
    artifact_id = clear(event, "planArtifactId", data.plan_artifact_id)
    digest = clear_optional(event, "digest", data.digest)
    stored = state.artifacts.get(artifact_id)
    if digest is not None and stored is not None and stored != digest:
        raise InvalidTransition(
            f"plan {artifact_id} is proposed with digest {digest} but was stored with {stored}",
            event=event,
        )
    return {
        "status": "planning",
        "proposed_plan": ProposedPlan(artifact_id=artifact_id, digest=digest),
    }


def plan_validated(state: RunProjection, event: Event, data: PlanValidated) -> Update:
    artifact_id = clear(event, "planArtifactId", data.plan_artifact_id)
    proposed = state.proposed_plan
    if proposed is None:
        raise InvalidTransition(
            f"plan {artifact_id} is validated but no plan was proposed", event=event
        )
    if proposed.artifact_id != artifact_id:
        raise InvalidTransition(
            f"plan {artifact_id} is validated but the proposed plan is {proposed.artifact_id}",
            event=event,
        )
    return {"status": "executing", "plan_artifact_id": artifact_id, "proposed_plan": None}


def approval_required_v1(state: RunProjection, event: Event, data: ApprovalRequiredV1) -> Update:
    return approval_required(state, event, as_current(ApprovalRequired, event))


def approval_required(state: RunProjection, event: Event, data: ApprovalRequired) -> Update:
    digest = clear(event, "actionDigest", data.action_digest)
    expires_at = clear_optional(event, "expiresAt", data.expires_at)
    if expires_at is not None:
        instant(event, "expiresAt", expires_at)
    return {
        "status": "awaiting_approval",
        "pending_action_digest": digest,
        "approval_expires_at": expires_at,
        "resume_status": state.status,
    }


def approval_granted(state: RunProjection, event: Event, data: ApprovalGranted) -> Update:
    digest = clear(event, "actionDigest", data.action_digest)
    pending = state.pending_action_digest
    if pending is None:
        raise InvalidTransition("approval granted but no approval is pending", event=event)
    if digest != pending:
        raise InvalidTransition(
            f"approval granted for action {digest} but the pending action is {pending}",
            event=event,
        )
    expires_at = state.approval_expires_at
    if expires_at is not None and instant(event, "occurredAt", event.occurred_at) > instant(
        event, "expiresAt", expires_at
    ):
        raise InvalidTransition(
            f"approval granted at {event.occurred_at}, after it expired at {expires_at}",
            event=event,
        )
    return {**_wait_over(state), "pending_action_digest": None, "approval_expires_at": None}


def input_required(
    state: RunProjection, event: Event, data: InputRequired | InputRequiredV1
) -> Update:
    """v1 and v2 alike: the pending request is its ID (the question stays in the event)."""
    request_id = clear(event, "requestId", data.request_id)
    return {
        "status": "awaiting_input",
        "pending_input": PendingInput(request_id=request_id),
        "resume_status": state.status,
    }


def input_received(
    state: RunProjection, event: Event, data: InputReceived | InputReceivedV1
) -> Update:
    request_id = clear(event, "requestId", data.request_id)
    pending = state.pending_input
    if pending is None:
        raise InvalidTransition(f"input {request_id} received but none is pending", event=event)
    if pending.request_id != request_id:
        raise InvalidTransition(
            f"input {request_id} received but the pending request is {pending.request_id}",
            event=event,
        )
    return {**_wait_over(state), "pending_input": None}


def _wait_over(state: RunProjection) -> Update:
    """A granted approval or a received input: the run goes back to the status it waited in."""
    return {"status": state.resume_status or "executing", "resume_status": None}


def state_transitioned(state: RunProjection, event: Event, data: StateTransitioned) -> Update:
    source, target = data.from_status, data.to_status
    if source != state.status:
        raise InvalidTransition(
            f"transition from {source} but the run is {state.status}", event=event
        )
    if target == source:
        raise InvalidTransition(f"transition from {source} to itself", event=event)
    if target in TERMINAL:
        raise InvalidTransition(
            f"{target} is reached only through run.succeeded, run.failed or "
            "run.cancellation_acknowledged (which carry the outcome)",
            event=event,
        )
    if target in WAITING:
        raise InvalidTransition(
            f"{target} is entered only through run.approval_required or run.input_required "
            "(which say what is awaited)",
            event=event,
        )
    return {"status": target}


def cancellation_requested(
    state: RunProjection, event: Event, data: CancellationRequested
) -> Update:
    return {"cancellation_requested": True}


def cancellation_acknowledged(
    state: RunProjection, event: Event, data: CancellationAcknowledged
) -> Update:
    if not state.cancellation_requested:
        raise InvalidTransition("cancellation acknowledged but none was requested", event=event)
    return {"status": "cancelled", "terminal_reason": data.reason}


def succeeded(state: RunProjection, event: Event, data: RunSucceeded) -> Update:
    return {"status": "succeeded"}


def failed(state: RunProjection, event: Event, data: RunFailed) -> Update:
    return {"status": "failed", "terminal_reason": data.reason}


def content_erased(state: RunProjection, event: Event, data: ContentErased) -> Update:
    """Erasure changes no status, and comes after the run ended as well as before."""
    return {"erased_at": event.occurred_at, "erasure_reason": data.reason}


#: The run's lifecycle rows of the projector's table (:data:`~runtrail.projection.projector.RULES`):
#: the statuses each event may apply in, and its handler.
RULES: dict[tuple[str, int], Rule[Any]] = {
    ("run.accepted", 1): Rule(RunAccepted, accepted_again, LIVE, "no run yet"),
    ("run.branched", 1): Rule(
        RunBranched, branched, frozenset({"received"}), "a just-accepted run (received)"
    ),
    ("run.resumed", 1): Rule(RunResumed, resumed, LIVE, LIVE_NEEDS),
    ("run.plan_proposed", 1): Rule(PlanProposed, plan_proposed, ACTIVE, ACTIVE_NEEDS),
    ("run.plan_validated", 1): Rule(
        PlanValidated, plan_validated, frozenset({"planning"}), "a proposed plan (planning)"
    ),
    ("run.approval_required", 1): Rule(
        ApprovalRequiredV1, approval_required_v1, ACTIVE, ACTIVE_NEEDS
    ),
    ("run.approval_required", 2): Rule(ApprovalRequired, approval_required, ACTIVE, ACTIVE_NEEDS),
    ("run.approval_granted", 1): Rule(
        ApprovalGranted,
        approval_granted,
        frozenset({"awaiting_approval"}),
        "a pending approval (awaiting_approval)",
    ),
    ("run.input_required", 1): Rule(InputRequiredV1, input_required, ACTIVE, ACTIVE_NEEDS),
    ("run.input_required", 2): Rule(InputRequired, input_required, ACTIVE, ACTIVE_NEEDS),
    ("run.input_received", 1): Rule(
        InputReceivedV1,
        input_received,
        frozenset({"awaiting_input"}),
        "a pending input request (awaiting_input)",
    ),
    ("run.input_received", 2): Rule(
        InputReceived,
        input_received,
        frozenset({"awaiting_input"}),
        "a pending input request (awaiting_input)",
    ),
    ("run.state_transitioned", 1): Rule(
        StateTransitioned,
        state_transitioned,
        ACTIVE,
        ACTIVE_NEEDS + "; a wait ends only with its grant or input",
    ),
    ("run.cancellation_requested", 1): Rule(
        CancellationRequested, cancellation_requested, LIVE, LIVE_NEEDS
    ),
    ("run.cancellation_acknowledged", 1): Rule(
        CancellationAcknowledged, cancellation_acknowledged, LIVE, LIVE_NEEDS
    ),
    ("run.succeeded", 1): Rule(
        RunSucceeded, succeeded, ACTIVE, ACTIVE_NEEDS + "; nothing may still be awaited"
    ),
    ("run.failed", 1): Rule(RunFailed, failed, LIVE, LIVE_NEEDS),
    ("run.content_erased", 1): Rule(
        ContentErased, content_erased, LIVE | TERMINAL, "a run (ended or not)"
    ),
}
