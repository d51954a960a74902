"""Builders of events and runs for the projection tests (no tests here).

Named ``test_projection_*`` only because that is the projection area's file pattern. Events
are built as JSON forms and validated with ``validate_json_form``, as a consumer gets them.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from runtrail.events import CURRENT_VERSIONS, Event, EventCodec, validate_json_form

FIXTURES = Path(__file__).resolve().parents[1] / "schemas" / "runtrail_schemas" / "fixtures"
CODEC = EventCodec()
T0 = "2026-11-29T10:00:00Z"


def make_event(
    event_type: str,
    data: dict[str, Any],
    sequence: int,
    *,
    version: int | None = None,
    run_id: str = "run-1",
    tenant: str = "t1",
    event_id: str | None = None,
    occurred_at: str = T0,
    turn_id: str | None = None,
    step: int | None = None,
    actor: dict[str, str] | None = None,
    recorded_at: str | None = None,
) -> Event:
    """A validated event built from its JSON form, as the codec would hand it over."""
    return validate_json_form(
        {
            "eventId": event_id or str(uuid.uuid4()),
            "runId": run_id,
            "tenantId": tenant,
            "sequence": str(sequence),
            "type": event_type,
            "schemaVersion": CURRENT_VERSIONS[event_type] if version is None else version,
            "occurredAt": occurred_at,
            "recordedAt": recorded_at,
            "actor": actor or {"kind": "agent", "id": "test-agent"},
            "causationEventId": None,
            "correlationId": f"corr-{run_id}",
            "sessionId": "sess-1",
            "turnId": turn_id,
            "step": step,
            "data": data,
        }
    )


class Run:
    """Appends events to one run with consecutive sequences (and deterministic event IDs)."""

    def __init__(self, run_id: str = "run-1", tenant: str = "t1") -> None:
        self.run_id = run_id
        self.tenant = tenant
        self.events: list[Event] = []

    @property
    def next_sequence(self) -> int:
        return len(self.events) + 1

    def build(self, event_type: str, data: dict[str, Any] | None = None, **kw: Any) -> Event:
        """The next event, not appended (to try it against a state)."""
        kw.setdefault("event_id", f"{self.tenant}/{self.run_id}/{self.next_sequence}")
        return make_event(
            event_type,
            data or {},
            self.next_sequence,
            run_id=self.run_id,
            tenant=self.tenant,
            **kw,
        )

    def add(self, event_type: str, data: dict[str, Any] | None = None, **kw: Any) -> Event:
        event = self.build(event_type, data, **kw)
        self.events.append(event)
        return event


def full_run(run_id: str = "run-1", tenant: str = "t1") -> Run:
    """A run that touches every kind of event, ending in success."""
    r = Run(run_id, tenant)
    r.add("run.accepted", {"goalRef": "goal://1", "policyVersion": "p-1"})
    r.add("run.plan_proposed", {"planArtifactId": "plan-1", "digest": "sha256:p1"})
    r.add("artifact.stored", {"artifactId": "plan-1", "digest": "sha256:p1"})
    r.add("run.plan_validated", {"planArtifactId": "plan-1"})
    r.add("budget.reserved", {"budgetId": "tokens", "amount": 1000, "unit": "tokens"})
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id="turn-1", step=1)
    r.add(
        "MODEL_RESPONSE",
        {"message": "a", "raw": {"usage": {"prompt_tokens": 100, "completion_tokens": 20}}},
        turn_id="turn-1",
        step=1,
    )
    r.add("MODEL_RETRY", {"attempt": 2, "reason": "overloaded"}, turn_id="turn-1", step=1)
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id="turn-1", step=1)
    r.add("MODEL_REASONING", {"text": "private thoughts"}, turn_id="turn-1", step=1)
    r.add(
        "MODEL_RESPONSE",
        {"message": "b", "raw": {"usage": {"prompt_tokens": 120, "completion_tokens": 30}}},
        turn_id="turn-1",
        step=1,
    )
    r.add("STEP_END", {"reason": "tool_use"}, turn_id="turn-1", step=1)
    r.add(
        "model.operation_completed",
        {"provider": "p", "modelId": "m", "inputTokens": 120, "outputTokens": 30},
    )
    r.add("TOOL_CALL", {"callId": "c1", "toolName": "send_email"}, turn_id="turn-1", step=2)
    r.add(
        "tool.invocation_requested",
        {"invocationId": "inv-1", "toolName": "send_email", "idempotencyKey": "k-1"},
    )
    r.add(
        "run.approval_required",
        {"actionDigest": "sha256:a1", "reason": "sends mail", "expiresAt": "2026-11-30T00:00:00Z"},
        version=2,
    )
    r.add("run.approval_granted", {"actionDigest": "sha256:a1", "approvedBy": "op:alice"})
    r.add("tool.invocation_started", {"invocationId": "inv-1"})
    r.add("tool.invocation_uncertain", {"invocationId": "inv-1", "reason": "reset"})
    r.add("tool.invocation_succeeded", {"invocationId": "inv-1", "resultDigest": "sha256:r1"})
    r.add("TOOL_RESULT", {"callId": "c1", "toolName": "send_email"}, turn_id="turn-1", step=2)
    r.add("run.input_required", {"requestId": "ask-1"})
    r.add("run.input_received", {"requestId": "ask-1"})
    r.add("budget.committed", {"budgetId": "tokens", "amount": 150, "unit": "tokens"})
    r.add("budget.released", {"budgetId": "tokens", "amount": 850, "unit": "tokens"})
    r.add("session.snapshot", {"lastAppliedSequence": 25})
    r.add("run.succeeded", {"resultRef": "blob://r"})
    return r


def listed_run(n: int, tenant: str = "t1") -> Run:
    """Run ``n`` of a runs list: minute ``n`` of the day, a session, a model, a tool; every
    third one retries a model call (an error), every fourth one is still open (no
    run.succeeded)."""
    run = Run(f"run-{n:03d}", tenant)
    at = f"2026-11-29T10:{n:02d}:00Z"
    later = f"2026-11-29T10:{n:02d}:30Z"
    run.add("run.accepted", {"goalRef": "g", "policyVersion": "p"}, occurred_at=at)
    model = "gpt-mini" if n % 2 else "Claude-Haiku"
    run.add("MODEL_REQUEST", {"prompt": {"model": model}}, step=1, occurred_at=at)
    if n % 3 == 0:
        run.add("MODEL_RETRY", {"attempt": 2, "reason": "overloaded"}, step=1, occurred_at=at)
    run.add("MODEL_RESPONSE", {"message": "ok", "raw": None}, step=1, occurred_at=at)
    run.add("TOOL_CALL", {"callId": "c", "toolName": f"tool_{n % 5}"}, step=2, occurred_at=later)
    if n % 4:
        run.add("run.succeeded", {"resultRef": "blob://r"}, occurred_at=later)
    return run
