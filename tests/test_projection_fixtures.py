"""Every retained event version decodes, upcasts and projects; v1 approvals project as v2."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtrail.events import DATA_MODELS, Event, validate_json_form
from runtrail.projection import RULES, RunProjection, apply_event, replay
from tests.projection_support import CODEC, FIXTURES, T0, Run, make_event


# --- fixtures of every retained version ----------------------------------------------------------
def fixture_forms() -> dict[tuple[str, int], dict[str, Any]]:
    forms = {}
    for path in sorted(FIXTURES.glob("*.json")):
        form = json.loads(path.read_text())
        forms[(form["type"], form["schemaVersion"])] = form
    return forms


#: What must have happened before each fixture (run-7f3a of tenant acme, sequences 1..4).
PRECONDITIONS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "run.plan_validated": [("run.plan_proposed", {"planArtifactId": "plan-1"})],
    "run.state_transitioned": [("run.plan_proposed", {"planArtifactId": "plan-1"})],
    "run.approval_granted": [("run.approval_required", {"actionDigest": "sha256:9b2e01"})],
    "run.input_received": [("run.input_required", {"requestId": "ask-1"})],
    "run.cancellation_acknowledged": [("run.cancellation_requested", {})],
    "budget.committed": [
        ("budget.reserved", {"budgetId": "tokens", "amount": 1, "unit": "tokens"})
    ],
    "budget.released": [("budget.reserved", {"budgetId": "tokens", "amount": 1, "unit": "tokens"})],
    "tool.invocation_started": [
        ("tool.invocation_requested", {"invocationId": "inv-1", "toolName": "send_email"})
    ],
    "tool.invocation_succeeded": [
        ("tool.invocation_requested", {"invocationId": "inv-1", "toolName": "send_email"})
    ],
    "tool.invocation_failed": [
        ("tool.invocation_requested", {"invocationId": "inv-1", "toolName": "send_email"})
    ],
    "tool.invocation_uncertain": [
        ("tool.invocation_requested", {"invocationId": "inv-1", "toolName": "send_email"})
    ],
}


def _context(event_type: str) -> RunProjection | None:
    if event_type == "run.accepted":
        return None
    r = Run("run-7f3a", "acme")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    for prior_type, data in PRECONDITIONS.get(event_type, []):
        version = 2 if prior_type == "run.approval_required" else 1
        r.add(prior_type, data, version=version)
    return replay(r.events)


def test_every_retained_version_has_a_fixture_and_a_rule() -> None:
    assert set(fixture_forms()) == set(DATA_MODELS)
    assert set(RULES) == set(DATA_MODELS), "a retained event version has no projector rule"


@pytest.mark.parametrize("key", sorted(DATA_MODELS), ids=lambda k: f"{k[0]}.v{k[1]}")
def test_fixture_decodes_upcasts_and_projects(key: tuple[str, int]) -> None:
    form = fixture_forms()[key]
    decoded = CODEC.decode(CODEC.encode_json_form(form))
    assert decoded.written["schemaVersion"] == key[1]
    event = decoded.event
    before = _context(key[0])
    after = apply_event(before, event)
    assert after.version == event.sequence == 5
    assert after.last_event_id == event.event_id
    assert after != before
    assert RunProjection.from_json(after.to_json()) == after


# --- schema evolution: v1 approval_required ------------------------------------------------------
def _approval_form(version: int) -> dict[str, Any]:
    data: dict[str, Any] = {"actionDigest": "sha256:a1", "reason": "sends mail"}
    if version == 2:
        data["expiresAt"] = None
    return {
        "eventId": "evt-approval",
        "runId": "run-1",
        "tenantId": "t1",
        "sequence": "2",
        "type": "run.approval_required",
        "schemaVersion": version,
        "occurredAt": T0,
        "recordedAt": None,
        "actor": {"kind": "agent", "id": "a"},
        "causationEventId": None,
        "correlationId": "c",
        "sessionId": None,
        "turnId": None,
        "step": None,
        "data": data,
    }


def test_v1_approval_upcasts_to_the_same_projection_as_v2_with_null_expiry() -> None:
    accepted = make_event(
        "run.accepted", {"goalRef": "g", "policyVersion": "p"}, 1, event_id="evt-accepted"
    )
    start = apply_event(None, accepted)
    v1 = CODEC.decode(CODEC.encode_json_form(_approval_form(1))).event
    v2 = CODEC.decode(CODEC.encode_json_form(_approval_form(2))).event
    assert (v1.schema_version, v1.data.model_dump()) == (2, v2.data.model_dump())
    from_v1, from_v2 = apply_event(start, v1), apply_event(start, v2)
    assert from_v1 == from_v2
    assert from_v1.status == "awaiting_approval"
    assert from_v1.pending_action_digest == "sha256:a1"
    assert from_v1.approval_expires_at is None


def test_a_v1_event_given_directly_applies_through_the_same_upcaster() -> None:
    """The v1 rule never invents an expiry: it upcasts, then applies as v2."""
    accepted = make_event("run.accepted", {"goalRef": "g", "policyVersion": "p"}, 1)
    start = apply_event(None, accepted)
    raw_v1 = validate_json_form(_approval_form(1))
    assert raw_v1.schema_version == 1
    via_codec = CODEC.decode(CODEC.encode_json_form(_approval_form(1))).event
    assert apply_event(start, raw_v1) == apply_event(start, via_codec)


def test_a_stream_mixing_v1_and_v2_projects_like_a_v2_only_stream() -> None:
    def stream(first_version: int) -> list[Event]:
        forms = []
        r = Run()
        r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"}, event_id="e1")
        forms.append(r.events[0].json_form())
        approval = _approval_form(first_version)
        approval["eventId"], approval["sequence"] = "e2", "2"
        forms.append(approval)
        r2 = make_event(
            "run.approval_granted",
            {"actionDigest": "sha256:a1", "approvedBy": "x"},
            3,
            event_id="e3",
        )
        forms.append(r2.json_form())
        again = _approval_form(2)
        again["eventId"], again["sequence"] = "e4", "4"
        forms.append(again)
        return [CODEC.decode(CODEC.encode_json_form(f)).event for f in forms]

    assert replay(stream(1)) == replay(stream(2))
