"""A command and its outcome: what a caller asks the event store, and what it answers.

A command carries the projection version its sender observed (``expectedVersion``; 0 for a run
that does not exist yet) and an idempotency key. The store answers with a
:class:`CommandOutcome`: accepted (the appended events, the new version) or refused (a stable
``code``, a reason, and the current version, so the caller can reload and decide).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from runtrail.events.envelope import Actor, CamelModel, NonBlank
from runtrail.whole_numbers import MAX_INT64

#: Why a command was refused (stable, machine-readable); ``accepted`` when it was not.
OutcomeCode = Literal[
    "accepted",
    "stale",
    "unknown-command",
    "invalid-command",
    "invalid-transition",
    "invalid-event-data",
    "unknown-event-version",
    "run-terminal",
    "cancellation-requested",
    "idempotency-conflict",
    "protect-failed",
]


class Command(CamelModel):
    """One request to change a run, decided against the version its sender observed."""

    name: NonBlank
    tenant_id: NonBlank
    run_id: NonBlank
    expected_version: int = Field(ge=0, le=MAX_INT64)  # a store's 64-bit version column
    idempotency_key: NonBlank
    actor: Actor
    data: dict[str, Any] = Field(default_factory=dict)
    correlation_id: str | None = None
    causation_event_id: str | None = None


class CommandOutcome(CamelModel):
    """The store's answer. ``duplicate``: the first outcome of this idempotency key, replayed."""

    accepted: bool
    code: OutcomeCode
    version: int
    reason: str | None = None
    events: list[dict[str, Any]] = Field(default_factory=list)
    duplicate: bool = False

    @property
    def stale(self) -> bool:
        return self.code == "stale"


class CommandRefusal(CamelModel):
    """A refused command, as the store kept it: who asked what at which version, and why not.

    A refusal changed nothing, so it is no event of the run; it is kept apart from the
    accepted outcomes (which de-duplicate by idempotency key) because every refused attempt
    is a fact an operator triaging the run should see (a stale approval, a late cancel)."""

    name: str
    idempotency_key: str
    expected_version: int
    #: the run's version when it was refused (0: no such run)
    version: int
    code: OutcomeCode
    reason: str
    actor: Actor
    refused_at: str
