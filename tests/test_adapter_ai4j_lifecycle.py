"""The ai4j adapter gives each run its lifecycle, so the projector's status is right (issue 13).

ai4j has no run.* events; the adapter's mapper adds them (``EventMapper``): run.accepted and
run.state_transitioned (received → executing) before a run's first event, run.succeeded for
ai4j's FINAL_OUTPUT (after the STEP_END that closes its step: the projector rejects anything
after a terminal event), run.failed for its ERROR. The runs are ai4j's real ReAct runtime
(``Driver events``: a scripted model, and one whose stream fails); the forms go through the
projector's pure ``apply_event``. The e2e test runs the same through the broker and the real
projector service.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtrail.events import validate_json_form
from runtrail.projection.model import RunProjection
from runtrail.projection.projector import apply_event
from tests.ai4j_adapter import adapter

TERMINAL = {"run.succeeded", "run.failed"}


def project(forms: list[dict[str, Any]]) -> RunProjection:
    state: RunProjection | None = None
    for form in forms:
        state = apply_event(state, validate_json_form(form))  # raises on a rejected event
    assert state is not None
    return state


def test_a_normal_run_is_accepted_executing_then_succeeded() -> None:
    out = adapter().run("events", "life-ok")
    forms = out["runtrail"]
    types = [f["type"] for f in forms]
    assert types[:2] == ["run.accepted", "run.state_transitioned"]
    assert forms[1]["data"] == {
        "fromStatus": "received",
        "toStatus": "executing",
        "reason": "ai4j run started",
    }
    # ai4j sends FINAL_OUTPUT before the last STEP_END; run.succeeded comes after it, last
    assert out["ai4j"][-2:] == ["FINAL_OUTPUT", "STEP_END"]
    assert types[-2:] == ["STEP_END", "run.succeeded"]
    assert sum(t in TERMINAL for t in types) == 1
    assert [int(f["sequence"]) for f in forms] == list(range(1, len(forms) + 1))
    assert {f["sessionId"] for f in forms} == {"sess-life-ok"}
    state = project(forms)
    assert (state.status, state.origin, state.model_nodes) == ("succeeded", "accepted", 2)
    assert project(forms[:-1]).status == "executing"  # before the end, the run is executing


def test_a_run_whose_model_fails_is_failed_with_the_reason() -> None:
    out = adapter().run("events", "life-fails", "fail")
    assert out["thrown"] == "model exploded: 503 Service Unavailable"  # the agent saw it
    assert out["ai4j"][-1] == "ERROR"
    forms = out["runtrail"]
    types = [f["type"] for f in forms]
    assert types[0] == "run.accepted" and types[-1] == "run.failed"
    assert sum(t in TERMINAL for t in types) == 1
    assert forms[-1]["data"] == {"reason": "model exploded: 503 Service Unavailable"}
    state = project(forms)
    assert (state.status, state.terminal_reason) == (
        "failed",
        "model exploded: 503 Service Unavailable",
    )


def test_a_non_streaming_run_that_throws_is_failed_through_fail_run() -> None:
    """``Agent.run`` throws a failed model call without an ERROR event: the run would stay
    executing; ``failRun`` (the listener's ``runFailed``, from the agent's catch) ends it."""
    out = adapter().run("events", "life-sync", "fail-sync")
    assert out["ai4j"] == ["STEP_START", "MODEL_REQUEST"]  # no ERROR from ai4j
    assert out["failRun"] == 1
    forms = out["runtrail"]
    assert [f["type"] for f in forms] == [
        "run.accepted",
        "run.state_transitioned",
        "MODEL_REQUEST",
        "run.failed",
    ]
    assert forms[-1]["sessionId"] == "sess-life-sync"  # the run's session gets its end too
    assert project(forms).status == "failed"
    assert project(forms[:-1]).status == "executing"


def test_fail_run_after_ai4js_error_adds_nothing() -> None:
    out = adapter().run("events", "life-twice", "fail")
    assert out["failRun"] is None  # the run ended with ERROR: no second terminal event
    assert sum(f["type"] in TERMINAL for f in out["runtrail"]) == 1


@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_lifecycle_events_have_their_own_ids_and_the_runs_envelope(mode: str) -> None:
    forms = adapter().run("events", f"life-ids-{mode}", *(["fail"] if mode == "fail" else []))[
        "runtrail"
    ]
    ids = [f["eventId"] for f in forms]
    assert len(set(ids)) == len(ids)
    assert {(f["runId"], f["correlationId"], f["tenantId"]) for f in forms} == {
        (f"life-ids-{mode}", f"life-ids-{mode}", "acme")
    }
