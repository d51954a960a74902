"""The run projection: what state a run is in, derived only from its events.

``RunProjection`` is immutable and JSON-serialisable in camelCase, with sequences as base-10
strings (as in the event envelope, so a bigint survives JavaScript). It is what the store
keeps per (tenant, run), what a snapshot holds and what ``runtrail projection show`` prints.

Successive states share unchanged sub-objects (copy on write), so treat the dicts of a state
as read-only: mutating one would change every state that shares it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from runtrail.events.domain_events import RunStatus

__all__ = [
    "ACTIVE",
    "LIVE",
    "TERMINAL",
    "WAITING",
    "BudgetLine",
    "Frozen",
    "ModelNode",
    "PendingInput",
    "ProposedPlan",
    "RunProjection",
    "RunStatus",
    "SeqNo",
    "SequenceGap",
    "TokenTotals",
    "ToolIntent",
    "ToolOutcome",
    "updated",
]

#: A per-run sequence number: an int in Python, a base-10 string in JSON.
SeqNo = Annotated[
    int, Field(ge=0), PlainSerializer(lambda v: str(v), return_type=str, when_used="json")
]

#: Working statuses: the run is doing something and no human is being waited for.
ACTIVE: frozenset[RunStatus] = frozenset({"received", "planning", "executing", "reconciling"})
#: Statuses that wait for a person; only the matching grant or input leaves them.
WAITING: frozenset[RunStatus] = frozenset({"awaiting_input", "awaiting_approval"})
#: Every non-terminal status.
LIVE: frozenset[RunStatus] = ACTIVE | WAITING
#: Terminal statuses: nothing applies after them, so a finished run never resumes.
TERMINAL: frozenset[RunStatus] = frozenset({"succeeded", "failed", "cancelled"})


class Frozen(BaseModel):
    """Base of projection models: camelCase JSON, snake_case Python, immutable, strict keys."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


M = TypeVar("M", bound=Frozen)

_set_attribute = object.__setattr__


def updated(model: M, changes: dict[str, Any]) -> M:
    """``model.model_copy(update=changes)`` without its generic steps (they were a sixth of
    the replay's profile). A projection model allows no extra fields and has no private
    attributes, so its copy is its ``__dict__`` and fields set, updated; pydantic does the
    same with a ``copy.copy`` of each part. A model with extras or private values still
    goes through ``model_copy``. Like ``model_copy``, nothing is validated."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=changes)
    cls = type(model)
    copied = cls.__new__(cls)
    _set_attribute(copied, "__dict__", {**model.__dict__, **changes})
    _set_attribute(copied, "__pydantic_extra__", None)
    fields_set = model.__pydantic_fields_set__
    # a copy either way (never a set shared by two models), a union only when it grows
    grown = fields_set.copy() if fields_set.issuperset(changes) else fields_set | changes.keys()
    _set_attribute(copied, "__pydantic_fields_set__", grown)
    _set_attribute(copied, "__pydantic_private__", None)
    return copied


class ProposedPlan(Frozen):
    """A plan proposed and not yet validated."""

    artifact_id: str
    digest: str | None = None


class PendingInput(Frozen):
    """A clarification the run waits for."""

    request_id: str


class Resume(Frozen):
    """A new process continuing the run (run.resumed): who, where it took over, what the
    resume cache gave it, and where the earlier life's record ends (the crash gap's start)."""

    sequence: SeqNo
    occurred_at: str
    host: str | None = None
    pid: int | None = None
    previous_process: str | None = None
    after_sequence: SeqNo | None = None
    at_step: int | None = None
    cached_steps: int = 0
    cache_hits: int = 0


class ToolIntent(Frozen):
    """A tool invocation requested (and maybe started) whose outcome is not yet recorded."""

    tool_name: str
    idempotency_key: str | None = None
    state: Literal["requested", "started"] = "requested"


class ToolOutcome(Frozen):
    """The recorded outcome of an invocation; ``uncertain`` still needs reconciliation."""

    tool_name: str
    idempotency_key: str | None = None
    outcome: Literal["succeeded", "failed", "uncertain"]
    result_digest: str | None = None
    error: str | None = None
    reason: str | None = None
    #: True when a succeeded/failed outcome resolved an earlier ``uncertain`` one.
    reconciled: bool = False


class BudgetLine(Frozen):
    """Totals of one budget, in its unit (the unit is fixed by the first event)."""

    unit: str
    reserved: float = 0.0
    committed: float = 0.0
    released: float = 0.0
    exhausted: bool = False


class TokenTotals(Frozen):
    """Summed token counts; only reported values are added (an absent count adds nothing)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def of(cls, input_tokens: int, output_tokens: int) -> TokenTotals:
        """``TokenTotals(input_tokens=…, output_tokens=…)`` for counts that are already ints
        (sums of validated counts), without validating them again: twice a run step."""
        return updated(_NO_TOKENS, {"input_tokens": input_tokens, "output_tokens": output_tokens})


_NO_TOKENS = TokenTotals.model_construct(_fields_set=set())


class ModelNode(Frozen):
    """The open model node (seed 000: keyed ``turnId|step``, closed at STEP_END)."""

    key: str
    #: Per slot, the latest count a raw response of this node reported (None: never reported).
    input_tokens: int | None = None
    output_tokens: int | None = None


class SequenceGap(Frozen):
    """Sequences ``first``..``last`` (inclusive) never arrived before a later one was applied."""

    first: SeqNo
    last: SeqNo


class RunProjection(Frozen):
    """The state of one run after applying its events in sequence order."""

    tenant_id: str
    run_id: str
    status: RunStatus
    #: The sequence of the last applied event.
    version: SeqNo
    #: ``accepted``: opened by run.accepted; ``runtime``: opened by a runtime event (seed 000).
    origin: Literal["accepted", "runtime"]
    last_event_id: str
    policy_version: str | None = None
    #: Lineage (run.branched): the run whose saved state this one started from, and that
    #: state's address in the framework's names (a LangGraph time-travel replay or fork).
    parent_run_id: str | None = None
    branched_from: Any = None

    plan_artifact_id: str | None = None
    proposed_plan: ProposedPlan | None = None
    pending_action_digest: str | None = None
    approval_expires_at: str | None = None
    pending_input: PendingInput | None = None
    #: The status a pending approval or input returns to once granted or received.
    resume_status: RunStatus | None = None
    cancellation_requested: bool = False
    terminal_reason: str | None = None
    #: run.content_erased: when the run's protected content was last erased, and why.
    erased_at: str | None = None
    erasure_reason: str | None = None
    #: run.resumed: how many times a new process continued the run, and the latest of them.
    resumes: int = 0
    last_resume: Resume | None = None

    tool_intents: dict[str, ToolIntent] = Field(default_factory=dict)
    tool_outcomes: dict[str, ToolOutcome] = Field(default_factory=dict)
    budgets: dict[str, BudgetLine] = Field(default_factory=dict)
    artifacts: dict[str, str] = Field(default_factory=dict)

    model_operations: int = 0
    tokens: TokenTotals = Field(default_factory=TokenTotals)

    turn_id: str | None = None
    step: int | None = None
    model_nodes: int = 0
    tool_nodes: int = 0
    model_retries: int = 0
    #: Best-effort totals parsed from MODEL_RESPONSE raw usage; kept apart from ``tokens`` so
    #: a runtime that emits both never counts a call twice.
    runtime_tokens: TokenTotals = Field(default_factory=TokenTotals)
    open_model_node: ModelNode | None = None
    session_snapshot_sequence: SeqNo | None = None

    gaps: tuple[SequenceGap, ...] = ()

    #: When the run's first and latest applied events occurred (as their writers stamped
    #: them): what a runs list orders by and filters a time range on.
    started_at: str | None = None
    updated_at: str | None = None
    #: The sessions, models and tools the run's events named, in first-seen order (at most
    #: ``MAX_NAMES`` each): what a runs list searches.
    session_ids: tuple[str, ...] = ()
    model_ids: tuple[str, ...] = ()
    tool_names: tuple[str, ...] = ()

    @property
    def has_errors(self) -> bool:
        """Whether anything went wrong: the run failed, a model call was retried, or a tool
        invocation failed or has an outcome not known."""
        return (
            self.status == "failed"
            or self.model_retries > 0
            or any(o.outcome != "succeeded" for o in self.tool_outcomes.values())
        )

    @property
    def terminal(self) -> bool:
        """Whether the run has finished (no event applies any more)."""
        return self.status in TERMINAL

    def unresolved_invocations(self) -> list[str]:
        """Invocations a resume must reconcile: pending intents and uncertain outcomes."""
        uncertain = [i for i, o in self.tool_outcomes.items() if o.outcome == "uncertain"]
        return [*self.tool_intents, *uncertain]

    def json_form(self) -> dict[str, Any]:
        """The camelCase JSON form (sequences as decimal strings)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> RunProjection:
        return cls.model_validate_json(text)
