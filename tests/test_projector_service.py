"""``runtrail run projector`` over a real broker: one scenario topic, projected once, asserted
from several sides — valid runs, invalid transitions, terminal runs, every retained event
version, redaction, tenants, the CLI, the shadow rebuild, and v1/v2 schema evolution.

The scenario is produced once and the service runs once (module fixture) to keep the suite
lean on a shared machine; each test asserts one property of the result.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.projection import replay as pure_replay
from runtrail.publisher import Publisher
from runtrail.publisher.redaction import default_redactor
from runtrail.runtime.deadletter import H_OFFSET, H_PARTITION, H_REASON
from tests.projection_support import Run, full_run
from tests.projector_support import (
    Form,
    cli,
    copy_store,
    forms,
    interleave,
    metric,
    projection_at,
    projector,
    replay,
    scrape,
    sqlite_url,
    wait_caught_up,
)
from tests.support import consume_all, create_topic, fixture_forms, produce_forms, unique_topic
from tests.test_projection_fixtures import PRECONDITIONS

pytestmark = [pytest.mark.kafka]
PARTITIONS = 3
SECRET = "sk-live0123456789abcdefXYZ"


def _bad_transition() -> Run:
    r = Run("bad-transition")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("run.approval_granted", {"actionDigest": "sha256:x", "approvedBy": "op"})  # no request
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id="t", step=1)
    r.add("run.succeeded", {"resultRef": "blob://r"})
    return r


def _after_success() -> Run:
    r = Run("after-success")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("run.succeeded", {"resultRef": "blob://r"})
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id="t", step=1)  # resumes: refused
    return r


def _after_cancel() -> Run:
    r = Run("after-cancel")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("tool.invocation_requested", {"invocationId": "inv-1", "toolName": "send_email"})
    r.add("run.cancellation_requested", {})
    r.add("run.cancellation_acknowledged", {"reason": "operator"})
    r.add("tool.invocation_started", {"invocationId": "inv-1"})  # resumes: refused
    r.add("tool.invocation_succeeded", {"invocationId": "inv-1", "resultDigest": "sha256:r"})
    return r


def _approvals(version: int) -> Run:
    """A run asking approval twice: the first request in ``version``, the second in v2."""
    r = Run("approvals")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    first: dict[str, Any] = {"actionDigest": "sha256:a1", "reason": "mail"}
    if version == 2:
        first["expiresAt"] = None
    r.add("run.approval_required", first, version=version)
    r.add("run.approval_granted", {"actionDigest": "sha256:a1", "approvedBy": "op"})
    r.add(
        "run.approval_required",
        {"actionDigest": "sha256:a2", "expiresAt": "2026-11-30T00:00:00Z"},
        version=2,
    )
    r.add("run.approval_granted", {"actionDigest": "sha256:a2", "approvedBy": "op"})
    r.add("run.succeeded", {"resultRef": "blob://r"})
    return r


def _fixture_runs() -> list[list[Form]]:
    """One run per retained (type, version) fixture: its preconditions, then the fixture."""
    out = []
    for (event_type, version), fixture in sorted(fixture_forms().items()):
        run_id = f"fx-{event_type}-v{version}"
        r = Run(run_id, "acme")
        events: list[Form] = []
        if event_type != "run.accepted":
            r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
            for prior, data in PRECONDITIONS.get(event_type, []):
                r.add(prior, data, version=2 if prior == "run.approval_required" else 1)
            events = forms(r)
        sequence = str(len(events) + 1)  # contiguous: a hole would halt the run
        fixed = {**fixture, "runId": run_id, "eventId": f"{run_id}/fixture", "sequence": sequence}
        if "afterSequence" in fixture["data"]:  # a resume names an event before it in this run
            fixed["data"] = {**fixture["data"], "afterSequence": len(events)}
        out.append([*events, fixed])
    return out


def _as_v2(form: Form) -> Form:
    """The same event written as approval_required v2 (what the upcaster makes of v1)."""
    if (form["type"], form["schemaVersion"]) != ("run.approval_required", 1):
        return form
    return {**form, "schemaVersion": 2, "data": {**form["data"], "expiresAt": None}}


@dataclass
class Scenario:
    bootstrap: str
    topic: str
    db: Path
    work: Path
    runs: dict[tuple[str, str], list[Form]]
    metrics: str
    dead: list[Any]
    v2_topic: str


def _published_redacted_run(bootstrap: str, topic: str, spool: Path) -> list[Form]:
    """Published through the real publisher, which masks the key in the idempotencyKey;
    returns the forms as they were written (masked)."""
    r = Run("redacted")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add(
        "tool.invocation_requested",
        {"invocationId": "inv-1", "toolName": "charge", "idempotencyKey": SECRET},
    )
    r.add("tool.invocation_started", {"invocationId": "inv-1"})
    settings = Settings(bootstrap_servers=bootstrap, events_topic=topic, spool_dir=spool)
    with Publisher(settings) as publisher:
        for event in forms(r):
            assert publisher.on_event(event) is not None
        assert publisher.flush(30) == 0
    return [default_redactor(f) for f in forms(r)]


@pytest.fixture(scope="module")
def scenario(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    work = tmp_path_factory.mktemp("projector")
    topic = create_topic(kafka_bootstrap, unique_topic("proj"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    runs = {
        ("t1", "ok-1"): forms(full_run("ok-1", "t1")),
        ("t2", "ok-1"): forms(full_run("ok-1", "t2")),  # same run ID, another tenant
        ("t1", "bad-transition"): forms(_bad_transition()),
        ("t1", "after-success"): forms(_after_success()),
        ("t1", "after-cancel"): forms(_after_cancel()),
        ("t1", "approvals"): forms(_approvals(1)),
        **{("acme", f[0]["runId"]): f for f in _fixture_runs()},
    }
    ordered = interleave(*runs.values())
    produce_forms(kafka_bootstrap, topic, ordered)
    runs[("t1", "redacted")] = _published_redacted_run(kafka_bootstrap, topic, work / "spool")
    db = work / "live.db"
    proc = projector(kafka_bootstrap, topic, db, work / "svc.log")
    try:
        wait_caught_up(kafka_bootstrap, db, topic, PARTITIONS)
        metrics = scrape(proc)
        assert proc.terminate() == 0
    finally:
        proc.close()
    # one more than expected: waits the whole timeout unless a duplicate dead letter exists
    dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=5, timeout=10)
    v2_topic = create_topic(kafka_bootstrap, unique_topic("proj-v2"), partitions=PARTITIONS)
    produce_forms(kafka_bootstrap, v2_topic, [_as_v2(f) for f in ordered])
    produce_forms(kafka_bootstrap, v2_topic, runs[("t1", "redacted")])
    return Scenario(kafka_bootstrap, topic, db, work, runs, metrics, dead, v2_topic)


def _row(s: Scenario, tenant: str, run: str) -> Any:
    with projection_at(s.db) as store:
        row = store.get(tenant, run)
    assert row is not None, f"{tenant}/{run} not projected"
    return row


def _events_of(s: Scenario, tenant: str, run: str) -> list[Any]:
    from runtrail.events import validate_json_form

    return [validate_json_form(f) for f in s.runs[(tenant, run)]]


def test_valid_runs_equal_a_pure_replay_of_their_events(scenario: Scenario) -> None:
    for tenant, run in [("t1", "ok-1"), ("t2", "ok-1"), ("t1", "approvals")]:
        row = _row(scenario, tenant, run)
        assert not row.halted
        assert row.state == pure_replay(_events_of(scenario, tenant, run))
        assert row.status == "succeeded"


def test_an_invalid_transition_halts_its_run_visibly_and_others_continue(
    scenario: Scenario,
) -> None:
    row = _row(scenario, "t1", "bad-transition")
    assert row.halted
    assert row.halt_reason.startswith("invalid-transition: run.approval_granted v1 at sequence 2")
    c = row.halt_coordinates
    assert (c.sequence, c.event_id, c.topic) == (2, "t1/bad-transition/2", scenario.topic)
    assert row.state is not None and row.state.version == 1  # the last good state stays
    assert row.state.status == "received"
    # the event is in the dead-letter topic with the projector's reason and its coordinates
    halting = [m for m in scenario.dead if dict(m.headers())[H_REASON] == b"invalid-transition"]
    coordinates = {
        (int(dict(m.headers())[H_PARTITION]), int(dict(m.headers())[H_OFFSET])) for m in halting
    }
    assert (c.partition, c.offset) in coordinates
    # the gauge, and the later events of halted runs waiting (counted, not applied)
    assert metric(scenario.metrics, "runtrail_projection_halted_runs") == 4
    skipped = metric(scenario.metrics, "runtrail_projection_events_total", outcome="skipped")
    assert skipped == 2 + 1 + 1  # after their halt: bad-transition 2, after-cancel 1, redacted 1
    # other runs went on: everything not halted here is fully applied
    assert _row(scenario, "t1", "ok-1").version == len(scenario.runs[("t1", "ok-1")])


def test_each_halt_is_dead_lettered_exactly_once_after_a_clean_run(scenario: Scenario) -> None:
    reasons = sorted(dict(m.headers())[H_REASON].decode() for m in scenario.dead)
    assert reasons == ["invalid-transition"] * 4
    keys = sorted(m.key() for m in scenario.dead)
    assert keys == [b"after-cancel", b"after-success", b"bad-transition", b"redacted"]


def test_cancelled_and_terminal_runs_cannot_resume(scenario: Scenario) -> None:
    for run, status, sequence in [
        ("after-success", "succeeded", 3),
        ("after-cancel", "cancelled", 5),
    ]:
        row = _row(scenario, "t1", run)
        assert row.halted
        assert f"at sequence {sequence}: run is {status}" in row.halt_reason
        assert "never resumes" in row.halt_reason
        assert row.state.status == status  # the projection stays as it ended
    cancelled = _row(scenario, "t1", "after-cancel").state
    assert list(cancelled.tool_intents) == ["inv-1"]  # evidence kept, never re-driven


def test_every_retained_event_version_decodes_upcasts_and_projects(scenario: Scenario) -> None:
    fixtures = [k for k in scenario.runs if k[0] == "acme"]
    assert len(fixtures) == len(fixture_forms())
    for tenant, run in fixtures:
        row = _row(scenario, tenant, run)
        assert not row.halted, row.halt_reason
        assert row.version == len(scenario.runs[(tenant, run)])
        assert row.state.last_event_id == f"{run}/fixture"


def test_redacted_content_halts_instead_of_being_guessed(scenario: Scenario) -> None:
    row = _row(scenario, "t1", "redacted")
    assert row.halted
    assert "idempotencyKey is redacted" in row.halt_reason
    assert SECRET not in json.dumps(row.state.json_form())
    assert row.state.tool_intents == {}  # no intent recorded under a guessed key


def test_tenants_never_mix(scenario: Scenario) -> None:
    a, b = _row(scenario, "t1", "ok-1"), _row(scenario, "t2", "ok-1")
    assert (a.tenant_id, b.tenant_id) == ("t1", "t2")
    assert a.state.last_event_id.startswith("t1/") and b.state.last_event_id.startswith("t2/")
    with projection_at(scenario.db) as store:
        assert {r.run_id for r in store.list(tenant="t2")} == {"ok-1"}


def test_projection_show_and_list(scenario: Scenario) -> None:
    store = sqlite_url(scenario.db)
    status, out, _ = cli(
        "projection", "show", "--run", "bad-transition", "--tenant", "t1", "--store", store
    )
    assert status == 0
    shown = json.loads(out)
    assert shown["halted"] is True and shown["haltedAt"]["sequence"] == "2"
    assert shown["projection"]["status"] == "received"
    status, out, _ = cli("projection", "show", "--run", "ok-1", "--tenant", "t2", "--store", store)
    assert json.loads(out)["projection"]["tenantId"] == "t2"
    status, _, err = cli("projection", "show", "--run", "nope", "--tenant", "t1", "--store", store)
    assert status == 1 and "no projection" in err
    status, out, _ = cli(
        "projection", "list", "--status", "cancelled", "--tenant", "t1", "--store", store
    )
    assert status == 0
    assert [line.split("\t")[:3] for line in out.splitlines()] == [
        ["t1", "after-cancel", "cancelled"]
    ]
    status, out, _ = cli("projection", "list", "--halted", "--json", "--store", store)
    assert sorted(json.loads(line)["runId"] for line in out.splitlines()) == [
        "after-cancel",
        "after-success",
        "bad-transition",
        "redacted",
    ]


def test_rebuild_into_a_fresh_store_matches_the_online_projection(
    scenario: Scenario, tmp_path: Path
) -> None:
    live = sqlite_url(scenario.db)
    status, out, err = replay(
        scenario.bootstrap,
        scenario.topic,
        tmp_path / "a.db",
        "--from-beginning",
        "--compare-with",
        live,
    )
    assert status == 0, out + err
    total = sum(len(f) for f in scenario.runs.values())
    assert f"replayed {total} events" in out
    assert "halted runs: 4" in out
    assert "no difference with" in out
    assert "events/s" in err  # progress while it runs (at least the final line)
    assert "note:" not in err  # both stores stand at the same offsets
    # a live store that drifted is caught, run by run
    tampered = copy_store(scenario.db, tmp_path / "tampered.db")
    with sqlite3.connect(tampered) as db:
        db.execute(
            'UPDATE projections SET state = replace(state, \'"status":"succeeded"\', '
            "'\"status\":\"failed\"') WHERE tenant_id = 't2' AND run_id = 'ok-1'"
        )
        db.execute("DELETE FROM projections WHERE run_id = 'approvals'")
    status, out, _ = replay(
        scenario.bootstrap,
        scenario.topic,
        tmp_path / "b.db",
        "--compare-with",
        sqlite_url(tampered),
    )
    assert status == 1
    assert "2 run(s) differ" in out
    assert "t2/ok-1: differs in status" in out
    assert "t1/approvals: only in the rebuild" in out


def test_the_rebuild_refuses_a_store_that_is_not_new(scenario: Scenario) -> None:
    status, _, err = replay(scenario.bootstrap, scenario.topic, scenario.db, "--quiet")
    assert status == 2 and "already holds" in err


def test_a_topic_with_v1_and_v2_approvals_projects_like_one_with_only_v2(
    scenario: Scenario, tmp_path: Path
) -> None:
    """The live store (v1 and v2 on the topic) against a rebuild of a v2-only topic."""
    written = [
        f["schemaVersion"]
        for r in scenario.runs.values()
        for f in r
        if f["type"] == "run.approval_required"
    ]
    assert 1 in written and 2 in written
    status, out, err = replay(
        scenario.bootstrap,
        scenario.v2_topic,
        tmp_path / "v2.db",
        "--compare-with",
        sqlite_url(scenario.db),
    )
    assert status == 0, out + err
    assert "no difference" in out
