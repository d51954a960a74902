"""The projector's transition table: valid flows, rejected transitions, terminal runs, redaction,
unknown versions, duplicates, gaps and runtime-only runs."""

from __future__ import annotations

from typing import Any

import pytest

from runtrail.events import Event
from runtrail.events.domain_events import ApprovalRequired
from runtrail.projection import (
    InvalidEventData,
    InvalidTransition,
    RunProjection,
    UnknownEventVersion,
    apply_event,
    replay,
)
from runtrail.projection.redaction import REDACTED
from tests.projection_support import Run, full_run, make_event

ACCEPTED = ("run.accepted", {"goalRef": "g", "policyVersion": "p"})


def started(*steps: tuple[Any, ...]) -> Run:
    """A run: accepted, then ``steps`` as (type, data[, version])."""
    r = Run()
    r.add(*ACCEPTED)
    for event_type, data, *version in steps:
        r.add(event_type, data, version=version[0] if version else 1)
    return r


def rejected(r: Run, event_type: str, data: dict[str, Any], *, version: int = 1, **kw: Any) -> str:
    """Apply the next event to the run's projection; it must be rejected. Returns the reason."""
    state = replay(r.events)
    event = r.build(event_type, data, version=version, **kw)
    with pytest.raises(InvalidTransition) as info:
        apply_event(state, event)
    assert info.value.sequence == event.sequence and info.value.event_type == event_type
    return str(info.value)


# --- the happy path ----------------------------------------------------------------------------
def test_full_run_projects_every_field() -> None:
    state = replay(full_run().events)
    assert state.status == "succeeded"
    assert state.version == 27
    assert state.origin == "accepted"
    assert state.policy_version == "p-1"
    assert state.plan_artifact_id == "plan-1" and state.proposed_plan is None
    assert state.artifacts == {"plan-1": "sha256:p1"}
    assert state.tool_intents == {}
    outcome = state.tool_outcomes["inv-1"]
    assert (outcome.outcome, outcome.reconciled, outcome.idempotency_key) == (
        "succeeded",
        True,
        "k-1",
    )
    line = state.budgets["tokens"]
    assert (line.reserved, line.committed, line.released, line.exhausted) == (1000, 150, 850, False)
    assert state.model_operations == 1
    assert (state.tokens.input_tokens, state.tokens.output_tokens) == (120, 30)
    assert (state.model_nodes, state.tool_nodes, state.model_retries) == (1, 1, 1)
    # the retry's response replaced the first one's usage in the same node (latest wins)
    assert (state.runtime_tokens.input_tokens, state.runtime_tokens.output_tokens) == (120, 30)
    assert (state.turn_id, state.step) == ("turn-1", 2)
    assert state.session_snapshot_sequence == 26
    assert state.gaps == ()
    assert "private thoughts" not in state.to_json()  # reasoning is never projected


def test_statuses_along_the_way() -> None:
    events = full_run().events
    statuses: list[str] = []
    state: RunProjection | None = None
    for event in events:
        state = apply_event(state, event)
        statuses.append(state.status)
    by_type = dict(zip((e.type for e in events), statuses, strict=False))
    assert statuses[0] == "received"
    assert statuses[1] == "planning"
    assert statuses[3] == "executing"
    assert statuses[15] == "awaiting_approval"
    assert statuses[16] == "executing"
    assert by_type["tool.invocation_uncertain"] == "reconciling"
    assert by_type["tool.invocation_succeeded"] == "executing"
    assert by_type["run.input_required"] == "awaiting_input"
    assert by_type["run.input_received"] == "executing"


def test_a_wait_returns_to_the_status_it_interrupted() -> None:
    r = started(("run.plan_proposed", {"planArtifactId": "plan-1"}))
    r.add("run.input_required", {"requestId": "ask-1"})
    assert replay(r.events).resume_status == "planning"
    r.add("run.input_received", {"requestId": "ask-1"})
    assert replay(r.events).status == "planning"


def test_state_transitioned_between_active_statuses() -> None:
    r = started(("run.state_transitioned", {"fromStatus": "received", "toStatus": "executing"}))
    assert replay(r.events).status == "executing"
    r.add("run.state_transitioned", {"fromStatus": "executing", "toStatus": "reconciling"})
    assert replay(r.events).status == "reconciling"


def test_cancellation_requested_then_acknowledged() -> None:
    r = started(("run.cancellation_requested", {"requestedBy": "op", "reason": "why"}))
    assert replay(r.events).cancellation_requested
    assert replay(r.events).status == "received"
    r.add("run.cancellation_acknowledged", {"reason": "stopped"})
    state = replay(r.events)
    assert (state.status, state.terminal_reason) == ("cancelled", "stopped")


def test_failed_records_the_reason() -> None:
    r = started(("run.failed", {"reason": "budget exhausted"}))
    state = replay(r.events)
    assert (state.status, state.terminal_reason) == ("failed", "budget exhausted")


def test_budget_exhausted_may_come_first_and_uncertain_moves_to_reconciling() -> None:
    r = started(
        ("budget.exhausted", {"budgetId": "usd", "unit": "usd"}),
        ("run.state_transitioned", {"fromStatus": "received", "toStatus": "executing"}),
        ("tool.invocation_requested", {"invocationId": "a", "toolName": "t"}),
        ("tool.invocation_requested", {"invocationId": "b", "toolName": "t"}),
        ("tool.invocation_uncertain", {"invocationId": "a", "reason": "timeout"}),
        ("tool.invocation_uncertain", {"invocationId": "b", "reason": "timeout"}),
        ("tool.invocation_failed", {"invocationId": "a", "error": "declined"}),
    )
    state = replay(r.events)
    assert state.budgets["usd"].exhausted
    assert state.status == "reconciling"  # b is still uncertain
    assert state.unresolved_invocations() == ["b"]
    r.add("tool.invocation_succeeded", {"invocationId": "b"})
    state = replay(r.events)
    assert state.status == "executing"
    assert state.unresolved_invocations() == []


def test_artifact_restated_with_the_same_digest_is_fine() -> None:
    r = started(
        ("artifact.stored", {"artifactId": "a", "digest": "sha256:1"}),
        ("artifact.stored", {"artifactId": "a", "digest": "sha256:1"}),
    )
    assert replay(r.events).artifacts == {"a": "sha256:1"}


# --- rejected transitions ------------------------------------------------------------------------
def test_first_event_must_open_the_run() -> None:
    event = make_event("run.plan_proposed", {"planArtifactId": "p"}, 1)
    with pytest.raises(InvalidTransition, match=r"first event must be run\.accepted"):
        apply_event(None, event)


def test_run_accepted_twice() -> None:
    assert "already exists" in rejected(started(), *ACCEPTED)


def test_approval_granted_without_a_pending_approval() -> None:
    reason = rejected(started(), "run.approval_granted", {"actionDigest": "d", "approvedBy": "x"})
    assert "pending approval" in reason


def test_approval_granted_for_a_different_digest() -> None:
    r = started(("run.approval_required", {"actionDigest": "sha256:a"}, 2))
    reason = rejected(r, "run.approval_granted", {"actionDigest": "sha256:b", "approvedBy": "x"})
    assert "pending action is sha256:a" in reason


def test_approval_granted_after_it_expired() -> None:
    r = started(
        ("run.approval_required", {"actionDigest": "d", "expiresAt": "2026-11-29T12:00:00Z"}, 2)
    )
    late = {"actionDigest": "d", "approvedBy": "x"}
    assert "expired" in rejected(
        r, "run.approval_granted", late, occurred_at="2026-11-29T12:00:01Z"
    )
    in_time = r.build("run.approval_granted", late, occurred_at="2026-11-29T11:59:59+00:00")
    assert apply_event(replay(r.events), in_time).status == "received"


def test_approval_required_with_an_unreadable_expiry() -> None:
    reason = rejected(
        started(), "run.approval_required", {"actionDigest": "d", "expiresAt": "soon"}, version=2
    )
    assert "ISO-8601" in reason


def test_plan_validated_without_a_proposed_plan() -> None:
    r = started(("run.state_transitioned", {"fromStatus": "received", "toStatus": "planning"}))
    assert "no plan was proposed" in rejected(r, "run.plan_validated", {"planArtifactId": "p"})


def test_plan_validated_for_another_plan() -> None:
    r = started(("run.plan_proposed", {"planArtifactId": "p1"}))
    assert "proposed plan is p1" in rejected(r, "run.plan_validated", {"planArtifactId": "p2"})


def test_plan_validated_outside_planning() -> None:
    assert "planning" in rejected(started(), "run.plan_validated", {"planArtifactId": "p"})


def test_plan_proposed_with_a_digest_other_than_the_stored_artifact() -> None:
    r = started(("artifact.stored", {"artifactId": "p", "digest": "sha256:1"}))
    reason = rejected(r, "run.plan_proposed", {"planArtifactId": "p", "digest": "sha256:2"})
    assert "stored with sha256:1" in reason


def test_artifact_digest_never_changes() -> None:
    r = started(("artifact.stored", {"artifactId": "a", "digest": "sha256:1"}))
    assert "rewrite" in rejected(r, "artifact.stored", {"artifactId": "a", "digest": "sha256:2"})


def test_input_received_without_a_pending_request() -> None:
    assert "awaiting_input" in rejected(started(), "run.input_received", {"requestId": "ask-1"})


def test_input_received_for_another_request() -> None:
    r = started(("run.input_required", {"requestId": "ask-1"}))
    assert "pending request is ask-1" in rejected(r, "run.input_received", {"requestId": "ask-2"})


@pytest.mark.parametrize(
    "event_type",
    [
        "tool.invocation_started",
        "tool.invocation_succeeded",
        "tool.invocation_uncertain",
    ],
)
def test_tool_event_for_an_unknown_invocation(event_type: str) -> None:
    data: dict[str, Any] = {"invocationId": "nope"}
    if event_type == "tool.invocation_uncertain":
        data["reason"] = "r"
    assert "nope" in rejected(started(), event_type, data)


def test_tool_failed_for_an_unknown_invocation() -> None:
    reason = rejected(started(), "tool.invocation_failed", {"invocationId": "x", "error": "e"})
    assert "unknown invocation x" in reason


def test_tool_outcome_twice() -> None:
    r = started(
        ("tool.invocation_requested", {"invocationId": "i", "toolName": "t"}),
        ("tool.invocation_succeeded", {"invocationId": "i"}),
    )
    reason = rejected(r, "tool.invocation_failed", {"invocationId": "i", "error": "e"})
    assert "already succeeded" in reason
    assert "already succeeded" in rejected(r, "tool.invocation_started", {"invocationId": "i"})


def test_tool_requested_twice_and_started_twice() -> None:
    requested = ("tool.invocation_requested", {"invocationId": "i", "toolName": "t"})
    r = started(requested)
    assert "already requested" in rejected(r, *requested)
    r.add("tool.invocation_started", {"invocationId": "i"})
    assert "already started" in rejected(r, "tool.invocation_started", {"invocationId": "i"})


def test_uncertain_twice_is_not_a_resolution() -> None:
    r = started(
        ("tool.invocation_requested", {"invocationId": "i", "toolName": "t"}),
        ("tool.invocation_uncertain", {"invocationId": "i", "reason": "r"}),
    )
    reason = rejected(r, "tool.invocation_uncertain", {"invocationId": "i", "reason": "again"})
    assert "already uncertain" in reason


def test_budget_rules() -> None:
    r = started(("budget.reserved", {"budgetId": "b", "amount": 5, "unit": "usd"}))
    assert "never reserved" in rejected(
        r, "budget.committed", {"budgetId": "other", "amount": 1, "unit": "usd"}
    )
    assert "counted in usd" in rejected(
        r, "budget.released", {"budgetId": "b", "amount": 1, "unit": "eur"}
    )


def test_state_transitioned_whose_from_status_differs() -> None:
    reason = rejected(
        started(), "run.state_transitioned", {"fromStatus": "planning", "toStatus": "executing"}
    )
    assert "from planning but the run is received" in reason


@pytest.mark.parametrize("target", ["succeeded", "failed", "cancelled"])
def test_state_transitioned_cannot_reach_a_terminal_status(target: str) -> None:
    reason = rejected(
        started(), "run.state_transitioned", {"fromStatus": "received", "toStatus": target}
    )
    assert "reached only through" in reason


@pytest.mark.parametrize("target", ["awaiting_input", "awaiting_approval"])
def test_state_transitioned_cannot_enter_a_wait(target: str) -> None:
    reason = rejected(
        started(), "run.state_transitioned", {"fromStatus": "received", "toStatus": target}
    )
    assert "entered only through" in reason


def test_state_transitioned_cannot_leave_a_wait() -> None:
    r = started(("run.approval_required", {"actionDigest": "d"}, 2))
    reason = rejected(
        r,
        "run.state_transitioned",
        {"fromStatus": "awaiting_approval", "toStatus": "executing"},
    )
    assert "wait ends only with its grant" in reason


def test_state_transitioned_to_itself() -> None:
    reason = rejected(
        started(), "run.state_transitioned", {"fromStatus": "received", "toStatus": "received"}
    )
    assert "to itself" in reason


def test_cancellation_acknowledged_without_a_request() -> None:
    reason = rejected(started(), "run.cancellation_acknowledged", {"reason": "r"})
    assert "none was requested" in reason


def test_succeeded_while_awaiting_approval() -> None:
    r = started(("run.approval_required", {"actionDigest": "d"}, 2))
    assert "nothing may still be awaited" in rejected(r, "run.succeeded", {})


def test_event_of_another_run_or_tenant() -> None:
    state = replay(started().events)
    others: list[dict[str, Any]] = [{"run_id": "run-2"}, {"tenant": "t2"}]
    for kw in others:
        event = make_event("run.failed", {"reason": "x"}, 2, **kw)
        with pytest.raises(InvalidTransition, match="applied to the projection of t1/run-1"):
            apply_event(state, event)


# --- terminal runs never resume ------------------------------------------------------------------
TERMINAL_ENDINGS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "succeeded": [("run.succeeded", {})],
    "failed": [("run.failed", {"reason": "boom"})],
    "cancelled": [("run.cancellation_requested", {}), ("run.cancellation_acknowledged", {})],
}

AFTERWARDS: list[tuple[str, dict[str, Any]]] = [
    ("run.state_transitioned", {"fromStatus": "succeeded", "toStatus": "executing"}),
    ("run.state_transitioned", {"fromStatus": "cancelled", "toStatus": "executing"}),
    ("run.plan_proposed", {"planArtifactId": "p"}),
    ("run.input_received", {"requestId": "ask-1"}),
    ("run.approval_granted", {"actionDigest": "d", "approvedBy": "x"}),
    ("run.succeeded", {}),
    ("run.failed", {"reason": "again"}),
    ("run.cancellation_requested", {}),
    ("run.accepted", {"goalRef": "g", "policyVersion": "p"}),
    ("tool.invocation_requested", {"invocationId": "i", "toolName": "t"}),
    ("MODEL_REQUEST", {"prompt": {}}),
    ("STEP_END", {}),
    ("session.snapshot", {"lastAppliedSequence": 1}),
]


@pytest.mark.parametrize("ending", sorted(TERMINAL_ENDINGS))
@pytest.mark.parametrize("after", AFTERWARDS, ids=lambda a: f"{a[0]}:{sorted(a[1].values())}")
def test_terminal_runs_cannot_resume(ending: str, after: tuple[str, dict[str, Any]]) -> None:
    r = started(*TERMINAL_ENDINGS[ending])
    assert replay(r.events).status == ending
    reason = rejected(r, *after)
    assert f"run is {ending} (terminal" in reason and "never resumes" in reason


@pytest.mark.parametrize("ending", sorted(TERMINAL_ENDINGS))
def test_a_redelivered_terminal_event_is_still_a_harmless_duplicate(ending: str) -> None:
    r = started(*TERMINAL_ENDINGS[ending])
    state = replay(r.events)
    assert apply_event(state, r.events[-1]) is state


# --- unknown versions stop the projection ------------------------------------------------------
def _unknown(event_type: str, version: int) -> Event:
    """An event no rule knows, as a newer producer might write it (bypassing validation)."""
    base = make_event("run.approval_required", {"actionDigest": "d"}, 2, version=2)
    return Event.model_construct(
        **{**dict(base), "type": event_type, "schema_version": version},
    )


@pytest.mark.parametrize(
    ("event_type", "version", "message"),
    [
        ("run.approval_required", 3, r"no rule for version 3 \(known: \[1, 2\]\)"),
        ("run.accepted", 0, r"no rule for version 0"),
        ("run.paused", 1, "unknown event type"),
    ],
)
def test_unknown_type_or_version_raises(event_type: str, version: int, message: str) -> None:
    state = replay(started().events)
    with pytest.raises(UnknownEventVersion, match=message):
        apply_event(state, _unknown(event_type, version))
    with pytest.raises(UnknownEventVersion):
        apply_event(None, _unknown(event_type, version))


def test_unknown_version_raises_even_for_an_already_applied_sequence() -> None:
    """Never ignored: a sequence that looks duplicate does not excuse an unknown version."""
    state = replay(started(("run.failed", {"reason": "x"})).events)
    old = Event.model_construct(**{**dict(_unknown("run.failed", 9)), "sequence": 1})
    with pytest.raises(UnknownEventVersion):
        apply_event(state, old)


def test_payload_of_the_wrong_model_is_rejected() -> None:
    base = make_event("run.failed", {"reason": "x"}, 2)
    forged = Event.model_construct(**{**dict(base), "data": ApprovalRequired(action_digest="d")})
    with pytest.raises(InvalidEventData, match="expected RunFailed"):
        apply_event(replay(started().events), forged)


# --- redacted content fails safely ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("setup", "event_type", "data", "field"),
    [
        ([], "run.approval_required", {"actionDigest": REDACTED}, "actionDigest"),
        (
            [("run.approval_required", {"actionDigest": "sha256:a"}, 2)],
            "run.approval_granted",
            {"actionDigest": REDACTED, "approvedBy": "x"},
            "actionDigest",
        ),
        (
            [],
            "run.approval_required",
            {"actionDigest": "d", "expiresAt": REDACTED},
            "expiresAt",
        ),
        ([], "run.plan_proposed", {"planArtifactId": REDACTED}, "planArtifactId"),
        ([], "run.input_required", {"requestId": f"ask-{REDACTED}"}, "requestId"),
        (
            [],
            "tool.invocation_requested",
            {"invocationId": "i", "toolName": "t", "idempotencyKey": f"sk-{REDACTED}"},
            "idempotencyKey",
        ),
        ([], "artifact.stored", {"artifactId": "a", "digest": REDACTED}, "digest"),
        ([], "budget.reserved", {"budgetId": REDACTED, "amount": 1, "unit": "usd"}, "budgetId"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_redacted_identity_fields_reject_the_event(
    setup: list[Any], event_type: str, data: dict[str, Any], field: str
) -> None:
    r = started(*setup)
    before = replay(r.events)
    version = 2 if event_type == "run.approval_required" else 1
    reason = rejected(r, event_type, data, version=version)
    assert f"{field} is redacted" in reason
    assert REDACTED not in before.to_json()


def test_a_redacted_approval_never_matches_a_pending_redacted_one() -> None:
    """Even two masks are not equal evidence: the first is already refused."""
    r = started()
    reason = rejected(r, "run.approval_required", {"actionDigest": REDACTED}, version=2)
    assert "never guessed" in reason


def test_redacted_descriptive_text_is_kept_verbatim_not_guessed() -> None:
    r = started(("run.failed", {"reason": f"auth failed for Bearer {REDACTED}"}))
    assert replay(r.events).terminal_reason == f"auth failed for Bearer {REDACTED}"


def test_redacted_usage_is_not_counted() -> None:
    r = started()
    r.add(
        "MODEL_RESPONSE",
        {"raw": {"usage": {"prompt_tokens": REDACTED, "completion_tokens": 7}}},
        turn_id="t",
        step=1,
    )
    state = replay(r.events)
    assert state.open_model_node is not None
    assert state.open_model_node.input_tokens is None
    assert (state.runtime_tokens.input_tokens, state.runtime_tokens.output_tokens) == (0, 7)


def test_marker_is_the_publishers() -> None:
    from runtrail.publisher.redaction import REDACTED as PUBLISHED

    assert REDACTED == PUBLISHED


# --- sequence: duplicates, gaps, late events, conflicts -----------------------------------------
def test_duplicate_delivery_returns_the_same_state() -> None:
    events = full_run().events
    state = replay(events)
    for event in events:
        assert apply_event(state, event) is state


def test_gap_is_applied_and_recorded() -> None:
    r = started()
    state = replay(r.events)
    later = make_event("run.failed", {"reason": "x"}, 5)
    after = apply_event(state, later)
    assert after.version == 5
    assert [(g.first, g.last) for g in after.gaps] == [(2, 4)]
    assert after.json_form()["gaps"] == [{"first": "2", "last": "4"}]


def test_first_event_after_a_gap_records_it() -> None:
    state = apply_event(None, make_event(*ACCEPTED, 3))
    assert [(g.first, g.last) for g in state.gaps] == [(1, 2)]


def test_a_late_event_inside_a_gap_is_rejected_not_dropped() -> None:
    state = apply_event(replay(started().events), make_event("STEP_END", {}, 4))
    late = make_event("STEP_END", {}, 3)
    with pytest.raises(InvalidTransition, match="late event: sequence 3"):
        apply_event(state, late)


def test_a_different_event_at_the_last_sequence_is_a_conflict() -> None:
    r = started()
    state = replay(r.events)
    impostor = make_event("run.failed", {"reason": "x"}, 1)
    with pytest.raises(InvalidTransition, match="claims the same sequence"):
        apply_event(state, impostor)


# --- runtime-only runs and runtime counters -----------------------------------------------------
def test_runtime_events_open_a_runtime_only_run_as_executing() -> None:
    r = Run()
    r.add("MODEL_REQUEST", {"prompt": {}}, turn_id="t1", step=1)
    r.add(
        "MODEL_RESPONSE",
        {"raw": {"usage": {"input_tokens": 10, "output_tokens": 2}}},
        turn_id="t1",
        step=1,
    )
    r.add("STEP_END", {}, turn_id="t1", step=1)
    r.add("MODEL_REQUEST", {"prompt": {}}, turn_id="t1", step=2)
    r.add(
        "MODEL_RESPONSE",
        {"raw": {"type": "message_start", "message": {"usage": {"input_tokens": 30}}}},
        turn_id="t1",
        step=2,
    )
    r.add("MODEL_RESPONSE", {"raw": {"usage": {"output_tokens": 5}}}, turn_id="t1", step=2)
    r.add("MODEL_RESPONSE", {"message": "tail", "raw": None}, turn_id="t1", step=2)
    r.add("TOOL_RESULT", {"toolName": "x"}, turn_id="t1", step=2)
    state = replay(r.events)
    assert (state.origin, state.status) == ("runtime", "executing")
    assert (state.model_nodes, state.tool_nodes) == (2, 1)
    # message.usage is not read: the one token parser follows ai4j (tests/test_node_tokens.py)
    assert (state.runtime_tokens.input_tokens, state.runtime_tokens.output_tokens) == (10, 7)
    assert (state.turn_id, state.step) == ("t1", 2)
    assert "already exists" in rejected(r, *ACCEPTED)


def test_cumulative_stream_usage_is_not_double_counted() -> None:
    r = Run()
    for n in (10, 20, 30):
        r.add("MODEL_RESPONSE", {"raw": {"usage": {"completion_tokens": n}}}, turn_id="t", step=1)
    assert replay(r.events).runtime_tokens.output_tokens == 30


def test_a_runtime_only_run_can_still_fail_but_not_be_accepted_late() -> None:
    r = Run()
    r.add("TOOL_CALL", {"callId": "c"})
    r.add("run.failed", {"reason": "crash"})
    assert replay(r.events).status == "failed"
