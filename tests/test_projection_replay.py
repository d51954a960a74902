"""Seed 002's replay tests: replay from zero equals replay from every valid snapshot, duplicate
delivery has no effect, untrusted snapshots are refused, a halted run does not stop others."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtrail.events import Event
from runtrail.projection import (
    PROJECTOR_VERSION,
    ProjectionError,
    ProjectionSnapshot,
    RunProjection,
    SnapshotMismatch,
    UnknownEventVersion,
    apply_event,
    from_snapshot,
    replay,
    replay_runs,
    take_snapshot,
)
from tests.projection_support import Run, full_run

# --- random valid runs ---------------------------------------------------------------------------
IDS = ["i1", "i2", "i3"]
LATER = "2026-11-29T11:00:00Z"
Template = tuple[str, dict[str, Any], dict[str, Any]]  # (type, data, builder kwargs)


def _candidate(rnd: random.Random, state: RunProjection) -> Template:
    """A plausible next event; the projector decides whether it is valid."""

    def pick(actual: list[str], others: list[str]) -> str:
        """Often a value the state is waiting for, so runs get deep; otherwise any value."""
        return rnd.choice(actual) if actual and rnd.random() < 0.7 else rnd.choice(others)

    inv = pick([*state.tool_intents, *state.tool_outcomes], IDS)
    budget = pick(list(state.budgets), ["b1", "b2"])
    line = state.budgets.get(budget)
    unit = line.unit if line is not None and rnd.random() < 0.8 else rnd.choice(["usd", "eur"])
    amount = rnd.choice([0.0, 0.1, 1.5, 250.0, rnd.uniform(0, 1000)])
    digest = pick([state.pending_action_digest or "sha256:a"], ["sha256:a", "sha256:b"])
    plan = pick([state.proposed_plan.artifact_id] if state.proposed_plan else [], ["p1", "p2"])
    request = pick([state.pending_input.request_id] if state.pending_input else [], ["r1", "r2"])
    turn = {"turn_id": rnd.choice(["t1", "t2"]), "step": rnd.randint(1, 3)}
    status = state.status if rnd.random() < 0.7 else rnd.choice(["received", "planning"])
    active = ["received", "planning", "executing", "reconciling"]
    tokens = [None, 0, rnd.randint(0, 10_000)]
    options: list[Template] = [
        ("run.plan_proposed", {"planArtifactId": plan}, {}),
        ("run.plan_validated", {"planArtifactId": plan}, {}),
        ("run.approval_required", {"actionDigest": digest}, {"version": 1}),
        (
            "run.approval_required",
            {"actionDigest": digest, "expiresAt": rnd.choice([None, LATER])},
            {"version": 2},
        ),
        ("run.approval_granted", {"actionDigest": digest, "approvedBy": "op"}, {}),
        ("run.input_required", {"requestId": request}, {}),
        ("run.input_received", {"requestId": request}, {}),
        ("run.state_transitioned", {"fromStatus": status, "toStatus": rnd.choice(active)}, {}),
        (
            "tool.invocation_requested",
            {"invocationId": inv, "toolName": "t", "idempotencyKey": inv},
            {},
        ),
        ("tool.invocation_started", {"invocationId": inv}, {}),
        ("tool.invocation_succeeded", {"invocationId": inv, "resultDigest": digest}, {}),
        ("tool.invocation_failed", {"invocationId": inv, "error": "e"}, {}),
        ("tool.invocation_uncertain", {"invocationId": inv, "reason": "r"}, {}),
        ("budget.reserved", {"budgetId": budget, "amount": amount, "unit": unit}, {}),
        ("budget.committed", {"budgetId": budget, "amount": amount, "unit": unit}, {}),
        ("budget.released", {"budgetId": budget, "amount": amount, "unit": unit}, {}),
        ("budget.exhausted", {"budgetId": budget, "unit": unit}, {}),
        ("artifact.stored", {"artifactId": rnd.choice(["p1", "a1"]), "digest": digest}, {}),
        (
            "model.operation_completed",
            {
                "provider": "p",
                "modelId": "m",
                "inputTokens": rnd.choice(tokens),
                "outputTokens": rnd.choice(tokens),
            },
            {},
        ),
        ("session.snapshot", {"lastAppliedSequence": state.version}, {}),
        ("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn),
        (
            "MODEL_RESPONSE",
            {
                "raw": {
                    "usage": {
                        "input_tokens": rnd.randint(0, 500),
                        "output_tokens": rnd.randint(0, 500),
                    }
                }
            },
            turn,
        ),
        ("MODEL_RESPONSE", {"message": "delta", "raw": None}, turn),
        ("MODEL_REASONING", {"text": "x"}, turn),
        ("MODEL_RETRY", {"attempt": 2}, turn),
        ("TOOL_CALL", {"callId": inv}, turn),
        ("TOOL_RESULT", {"callId": inv}, turn),
        ("STEP_END", {}, turn),
        ("run.cancellation_requested", {}, {}),
        ("run.cancellation_acknowledged", {"reason": "stop"}, {}),
        ("run.succeeded", {}, {}),
        ("run.failed", {"reason": "boom"}, {}),
    ]
    # endings are rarer, so most runs are long
    ending = ("run.succeeded", "run.failed", "run.cancellation_acknowledged")
    return rnd.choices(options, weights=[1 if o[0] in ending else 6 for o in options])[0]


@st.composite
def valid_runs(draw: st.DrawFn, max_attempts: int = 80) -> list[Event]:
    """A run of events each of which the projector accepts (rejected candidates are dropped)."""
    rnd = draw(st.randoms(use_true_random=True))
    r = Run()
    if rnd.random() < 0.8:
        r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    else:
        r.add("MODEL_REQUEST", {"prompt": {}}, turn_id="t1", step=1)
    state = replay(r.events)
    for _ in range(rnd.randint(5, max_attempts)):
        if state.terminal:
            break
        event_type, data, kw = _candidate(rnd, state)
        event = r.build(event_type, data, **kw)
        try:
            state = apply_event(state, event)
        except ProjectionError:
            continue
        r.events.append(event)
    return r.events


def _prefix_states(events: list[Event]) -> list[RunProjection]:
    states: list[RunProjection] = []
    state: RunProjection | None = None
    for event in events:
        state = apply_event(state, event)
        states.append(state)
    return states


def _through_json(snapshot: ProjectionSnapshot) -> ProjectionSnapshot:
    """A snapshot as a store would give it back."""
    return ProjectionSnapshot.from_json(snapshot.to_json())


# --- replay from zero == replay from each valid snapshot -----------------------------------------
def test_full_run_from_every_snapshot_equals_replay_from_zero() -> None:
    events = full_run().events
    expected = replay(events)
    for k, state in enumerate(_prefix_states(events), start=1):
        snapshot = _through_json(take_snapshot(state))
        assert snapshot.last_applied_sequence == k
        assert replay(events[k:], start=snapshot) == expected
        assert replay(events[k:], start=from_snapshot(snapshot)) == expected


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(valid_runs())
def test_random_runs_from_every_snapshot_equal_replay_from_zero(events: list[Event]) -> None:
    expected = replay(events)
    assert RunProjection.from_json(expected.to_json()) == expected
    assert replay(events) == expected  # deterministic
    for k, state in enumerate(_prefix_states(events), start=1):
        assert replay(events[k:], start=_through_json(take_snapshot(state))) == expected


def test_the_generator_reaches_varied_states() -> None:
    """Guard against a generator that only ever produces trivial runs."""
    seen: set[str] = set()
    lengths: list[int] = []

    @settings(max_examples=80, deadline=None, database=None, derandomize=True)
    @given(valid_runs())
    def collect(events: list[Event]) -> None:
        state = replay(events)
        seen.add(state.status)
        lengths.append(len(events))

    collect()
    assert len(seen) >= 5 and "succeeded" in seen
    assert max(lengths) >= 20


# --- duplicate delivery appends no duplicate effect ----------------------------------------------
@SETTINGS
@given(valid_runs(), st.randoms(use_true_random=False))
def test_redelivered_events_change_nothing(events: list[Event], rnd: random.Random) -> None:
    delivered: list[Event] = []
    for i, event in enumerate(events):
        delivered.append(event)
        for earlier in rnd.sample(events[: i + 1], k=min(i + 1, rnd.randint(0, 2))):
            delivered.append(earlier)  # an at-least-once consumer re-reading after a crash
    expected = _prefix_states(events)
    state: RunProjection | None = None
    for event in delivered:
        state = apply_event(state, event)
        assert state == expected[state.version - 1]
    assert state == expected[-1]


def test_redelivering_a_whole_batch_after_a_crash() -> None:
    events = full_run().events
    state = replay(events[:20])
    # the consumer crashed after applying 20 but before committing offset 10: 10.. come again
    assert replay(events[10:], start=state) == replay(events)


# --- snapshots that cannot be trusted --------------------------------------------------------
def test_snapshot_of_another_projector_version_is_refused() -> None:
    state = replay(full_run().events[:5])
    stale = ProjectionSnapshot(
        projector_version=PROJECTOR_VERSION + 1, last_applied_sequence=5, state=state
    )
    with pytest.raises(SnapshotMismatch, match="rebuild from events"):
        from_snapshot(stale)
    with pytest.raises(SnapshotMismatch):
        replay(full_run().events[5:], start=stale)


def test_snapshot_whose_sequence_disagrees_with_its_state_is_refused() -> None:
    state = replay(full_run().events[:5])
    odd = ProjectionSnapshot(
        projector_version=PROJECTOR_VERSION, last_applied_sequence=4, state=state
    )
    with pytest.raises(SnapshotMismatch, match="sequence 4"):
        from_snapshot(odd)


def test_snapshot_json_form() -> None:
    form = take_snapshot(replay(full_run().events[:3])).model_dump(mode="json", by_alias=True)
    assert form["projectorVersion"] == PROJECTOR_VERSION
    assert form["lastAppliedSequence"] == "3"
    assert form["state"]["version"] == "3"


def test_replay_of_nothing() -> None:
    with pytest.raises(ValueError, match="nothing to replay"):
        replay([])
    state = replay(full_run().events[:2])
    assert replay([], start=state) is state


# --- a halted run stops; the others go on ---------------------------------------------------------
def test_unknown_version_halts_its_run_and_the_rest_continue() -> None:
    good_a, bad, good_b = full_run("run-a"), full_run("run-b"), full_run("run-c", tenant="t2")
    unknown = Event.model_construct(
        **{**dict(bad.events[5]), "schema_version": 7}  # a version this projector does not know
    )
    bad_events = [*bad.events[:5], unknown, *bad.events[6:]]
    stream: list[Event] = []
    for i in range(max(len(good_a.events), len(bad_events), len(good_b.events))):
        for events in (good_a.events, bad_events, good_b.events):
            if i < len(events):
                stream.append(events[i])
    result = replay_runs(stream)
    assert result.projections[("t1", "run-a")] == replay(good_a.events)
    assert result.projections[("t2", "run-c")] == replay(good_b.events)
    assert set(result.halted) == {("t1", "run-b")}
    error = result.halted[("t1", "run-b")]
    assert isinstance(error, UnknownEventVersion) and error.sequence == 6
    assert result.projections[("t1", "run-b")] == replay(bad.events[:5])
    assert result.skipped == len(bad_events) - 6
