"""Unknown event versions stop the projection of their run; the other runs go on.

Two ways a projector meets a version it cannot interpret, both over a real broker:

* the event library decodes the event but this projector build has no rule for its version
  (a projector older than the event models it runs with: here, ``run.approval_required`` v2
  with its rule removed) — the projector itself refuses it: ``unknown-event-version``;
* a newer writer's version (an extra writer schema, ``RUNTRAIL_EXTRA_SCHEMA_DIRS``): the runtime
  dead-letters it before the projector sees it, and the run's next event finds the hole —
  ``missing-events`` — instead of the projection going on around it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtrail.events import EventCodec
from runtrail.projection import RULES
from runtrail.runtime.deadletter import H_REASON
from tests.projection_support import Run
from tests.projector_support import (
    InProcessProjector,
    forms,
    interleave,
    projection_at,
    wait_caught_up,
)
from tests.support import consume_all, create_topic, produce, produce_forms, unique_topic

pytestmark = [pytest.mark.kafka]
PARTITIONS = 2
SCHEMAS = Path(__file__).resolve().parents[1] / "schemas" / "runtrail_schemas"


def _with_approval(run_id: str) -> Run:
    r = Run(run_id)
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("run.approval_required", {"actionDigest": "sha256:a", "expiresAt": None}, version=2)
    r.add("run.approval_granted", {"actionDigest": "sha256:a", "approvedBy": "op"})
    r.add("run.succeeded", {"resultRef": "blob://r"})
    return r


def _plain(run_id: str) -> Run:
    r = Run(run_id)
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id="t", step=1)
    r.add("MODEL_RESPONSE", {"message": "hi", "raw": None}, turn_id="t", step=1)
    r.add("STEP_END", {"reason": "end_turn"}, turn_id="t", step=1)
    r.add("run.succeeded", {"resultRef": "blob://r"})
    return r


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("proj-unknown"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=1)
    return name


def test_a_version_without_a_projector_rule_halts_only_its_run(
    kafka_bootstrap: str, topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(RULES, ("run.approval_required", 2))  # this build knows only v1
    produce_forms(
        kafka_bootstrap,
        topic,
        interleave(
            forms(_with_approval("needs-v2")), forms(_plain("plain-1")), forms(_plain("plain-2"))
        ),
    )
    db = tmp_path / "live.db"
    service = InProcessProjector(kafka_bootstrap, topic, db)
    try:
        wait_caught_up(kafka_bootstrap, db, topic, PARTITIONS)
        halts = service.sample("runtrail_projection_halts_total", reason="unknown-event-version")
        skipped = service.sample("runtrail_projection_events_total", outcome="skipped")
    finally:
        assert service.stop() == 0
    with projection_at(db) as store:
        row = store.get("t1", "needs-v2")
        assert row is not None and row.halted
        assert row.halt_reason == (
            "unknown-event-version: run.approval_required v2 at sequence 2: "
            "no rule for version 2 (known: [1])"
        )
        assert row.state is not None and row.state.status == "received"
        for run in ("plain-1", "plain-2"):
            other = store.get("t1", run)
            assert other is not None and not other.halted
            assert (other.status, other.version) == ("succeeded", 5)
    assert (halts, skipped) == (1, 2)
    dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=20)
    assert [dict(m.headers())[H_REASON] for m in dead] == [b"unknown-event-version"]


def _v3_schema_dir(tmp_path: Path) -> Path:
    """A newer writer's run.approval_required v3 (adds approverGroup), unknown to this code."""
    text = (SCHEMAS / "run.approval_required.v2.avsc").read_text().replace("V2", "V3")
    schema: dict[str, Any] = json.loads(text)
    schema["doc"] = "run.approval_required v3"
    data = next(f for f in schema["fields"] if f["name"] == "data")["type"]
    data["fields"].append({"name": "approverGroup", "type": ["null", "string"], "default": None})
    folder = tmp_path / "newer-schemas"
    folder.mkdir()
    (folder / "run.approval_required.v3.avsc").write_text(json.dumps(schema))
    return folder


def test_a_newer_writers_version_is_dead_lettered_and_its_run_stops(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    newer = _v3_schema_dir(tmp_path)
    run = forms(_with_approval("from-newer-writer"))
    v3 = {**run[1], "schemaVersion": 3, "data": {**run[1]["data"], "approverGroup": "ops"}}
    writer = EventCodec([newer])
    values = [(f["runId"], writer.encode_json_form(f)) for f in [run[0], v3, *run[2:]]]
    produce(kafka_bootstrap, topic, values)
    produce_forms(kafka_bootstrap, topic, forms(_plain("plain-3")))
    db = tmp_path / "live.db"
    service = InProcessProjector(kafka_bootstrap, topic, db, extra_schema_dirs=[newer])
    try:
        wait_caught_up(kafka_bootstrap, db, topic, PARTITIONS)
    finally:
        assert service.stop() == 0
    with projection_at(db) as store:
        row = store.get("t1", "from-newer-writer")
        assert row is not None and row.halted
        assert row.halt_reason is not None
        assert row.halt_reason.startswith("missing-events: run.approval_granted v1 at sequence 3")
        assert row.state is not None and row.state.version == 1
        plain = store.get("t1", "plain-3")
        assert plain is not None and (plain.status, plain.halted) == ("succeeded", False)
    dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=2, timeout=20)
    assert sorted(dict(m.headers())[H_REASON] for m in dead) == [
        b"missing-events",
        b"unknown-event-type",  # the runtime's: a version newer than this code
    ]
