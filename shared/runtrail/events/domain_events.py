"""Payloads of the domain event types of seed 002: facts and decisions, never hidden reasoning.

Content that may need deletion (prompts, inputs, results) is carried by reference and digest,
not inline. ``run.approval_required`` is retained at v1 and v2 (v2 adds ``expiresAt``): the
first real schema evolution, lifted by the upcaster in :mod:`runtrail.events.upcasting`.
``run.branched`` records a run's lineage; ``run.input_required`` / ``run.input_received`` v2
may carry the question and the answer inline, as the runtime events carry a prompt (the
publisher's redaction applies to them alike). ``run.resumed`` records that a new process
continued the run, so a crash and its recovery stay visible after the fact.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from runtrail.events.envelope import EventData, JsonValue

RunStatus = Literal[
    "received",
    "planning",
    "awaiting_input",
    "awaiting_approval",
    "executing",
    "reconciling",
    "succeeded",
    "failed",
    "cancelled",
]


class RunAccepted(EventData):
    event_type = "run.accepted"
    goal_ref: str
    policy_version: str


class RunBranched(EventData):
    """The run started from an earlier run's saved state (a time-travel replay or fork), not
    from its input: ``parentRunId`` is the run whose state it started from (null when unknown),
    ``branchedFrom`` that state's address in the framework's own names (for LangGraph
    ``{"thread_id", "checkpoint_ns", "checkpoint_id"}``). Published right after run.accepted."""

    event_type = "run.branched"
    parent_run_id: str | None = None
    branched_from: JsonValue = None


class RunResumed(EventData):
    """A new process continued the run an earlier process left (a crash, a wait resumed
    elsewhere): ``host``/``pid`` name the new process, ``previousProcess`` the earlier one when
    known, ``afterSequence`` the earlier life's last recorded sequence (the crash gap ends at
    this event), ``atStep`` the first step the new process ran itself, ``cachedSteps`` the steps
    before it replayed wholly from the resume cache, ``cacheHits`` its model and tool hits.
    Published once per new life, just before its first own event."""

    event_type = "run.resumed"
    host: str | None = None
    pid: int | None = Field(default=None, ge=0)
    previous_process: str | None = None
    after_sequence: int | None = Field(default=None, ge=0)
    at_step: int | None = Field(default=None, ge=0)
    cached_steps: int = Field(default=0, ge=0)
    cache_hits: int = Field(default=0, ge=0)


class PlanProposed(EventData):
    event_type = "run.plan_proposed"
    plan_artifact_id: str
    digest: str | None = None


class PlanValidated(EventData):
    event_type = "run.plan_validated"
    plan_artifact_id: str


class ApprovalRequiredV1(EventData):
    """Retained v1: no expiry. Upcast to v2 with ``expiresAt = null``."""

    event_type = "run.approval_required"
    version = 1
    action_digest: str
    reason: str | None = None


class ApprovalRequired(EventData):
    """Current v2: the approval may expire."""

    event_type = "run.approval_required"
    version = 2
    action_digest: str
    reason: str | None = None
    expires_at: str | None = None


class ApprovalGranted(EventData):
    event_type = "run.approval_granted"
    action_digest: str
    approved_by: str


# Retained v1: the question by reference only. Upcast to v2 with ``prompt`` null.
# (A comment: a docstring would change the retained schema's doc.)
class InputRequiredV1(EventData):
    event_type = "run.input_required"
    version = 1
    request_id: str
    prompt_ref: str | None = None


class InputRequired(EventData):
    """Current v2: the question may be carried inline (``prompt``, any JSON; the publisher's
    redaction applies to it as to a model prompt) or by reference (``promptRef``)."""

    event_type = "run.input_required"
    version = 2
    request_id: str
    prompt_ref: str | None = None
    prompt: JsonValue = None


# Retained v1: the answer by reference only. Upcast to v2 with ``input`` null.
# (A comment: a docstring would change the retained schema's doc.)
class InputReceivedV1(EventData):
    event_type = "run.input_received"
    version = 1
    request_id: str
    input_ref: str | None = None


class InputReceived(EventData):
    """Current v2: the answer inline (``input``, any JSON, redacted like a prompt) or by
    reference (``inputRef``)."""

    event_type = "run.input_received"
    version = 2
    request_id: str
    input_ref: str | None = None
    input: JsonValue = None


class ToolInvocationRequested(EventData):
    event_type = "tool.invocation_requested"
    invocation_id: str
    tool_name: str
    arguments_digest: str | None = None
    idempotency_key: str | None = None


class ToolInvocationStarted(EventData):
    event_type = "tool.invocation_started"
    invocation_id: str


class ToolInvocationSucceeded(EventData):
    event_type = "tool.invocation_succeeded"
    invocation_id: str
    result_digest: str | None = None
    result_ref: str | None = None


class ToolInvocationFailed(EventData):
    event_type = "tool.invocation_failed"
    invocation_id: str
    error: str


class ToolInvocationUncertain(EventData):
    event_type = "tool.invocation_uncertain"
    invocation_id: str
    reason: str


class ModelOperationCompleted(EventData):
    event_type = "model.operation_completed"
    provider: str
    model_id: str
    prompt_version: str | None = None
    tool_schema_version: str | None = None
    request_id: str | None = None
    response_id: str | None = None
    output_ref: str | None = None
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    usage_source: Literal["estimated", "provider"] | None = None


class ArtifactStored(EventData):
    event_type = "artifact.stored"
    artifact_id: str
    digest: str
    media_type: str | None = None
    uri: str | None = None


class ContentErased(EventData):
    """Protected content of the run was erased: the data key of its subject destroyed
    (crypto-shredding) and the sealed objects deleted, with the derived copies counted in
    ``copiesDeleted``. It names no content and no subject (only ``subjectDigest``, sha256 of
    it); ``signature`` is a signed note of these facts by the audit key, when one is set up.
    Accepted after the run ended: erasure comes when it is asked for."""

    event_type = "run.content_erased"
    scope: str
    subject_digest: str
    key_id: str | None = None
    objects_deleted: int = 0
    copies_deleted: JsonValue = None
    reason: str
    requested_by: str
    signature: str | None = None


class BudgetReserved(EventData):
    event_type = "budget.reserved"
    budget_id: str
    amount: float = Field(ge=0)
    unit: str


class BudgetCommitted(EventData):
    event_type = "budget.committed"
    budget_id: str
    amount: float = Field(ge=0)
    unit: str


class BudgetReleased(EventData):
    event_type = "budget.released"
    budget_id: str
    amount: float = Field(ge=0)
    unit: str


class BudgetExhausted(EventData):
    event_type = "budget.exhausted"
    budget_id: str
    unit: str


class StateTransitioned(EventData):
    event_type = "run.state_transitioned"
    from_status: RunStatus
    to_status: RunStatus
    reason: str | None = None


class CancellationRequested(EventData):
    event_type = "run.cancellation_requested"
    requested_by: str | None = None
    reason: str | None = None


class CancellationAcknowledged(EventData):
    event_type = "run.cancellation_acknowledged"
    reason: str | None = None


class RunSucceeded(EventData):
    event_type = "run.succeeded"
    result_ref: str | None = None


class RunFailed(EventData):
    event_type = "run.failed"
    reason: str


class SessionSnapshot(EventData):
    """The agent's session checkpoint: inline state, or a reference to it with its digest."""

    event_type = "session.snapshot"
    last_applied_sequence: int = Field(ge=0)
    memory: JsonValue = None
    compact_results: JsonValue = None
    snapshot_ref: str | None = None
    digest: str | None = None
