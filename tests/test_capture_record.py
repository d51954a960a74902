"""The record's JSON form, its identifiers, and determinism under reprocessing."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from runtrail.capture import NodeIoRecord, NodePairer, derive_record_id
from tests.capture_support import RunEvents, feed_all, model_step, sample_records

SEED_FIELDS = {
    "recordId",
    "runId",
    "sessionId",
    "turnId",
    "step",
    "nodeType",
    "nodeId",
    "modelId",
    "inputs",
    "outputText",
    "outputs",
    "startedAtEpochMs",
    "capturedAtEpochMs",
    "durationMs",
    "reasoningText",
    "retryCount",
    "inputTokens",
    "outputTokens",
}


def test_json_form_has_the_seed_field_names_plus_tenant_sources_and_incomplete() -> None:
    model, _tool = sample_records()
    form = orjson.loads(model.to_json_line())
    assert set(form) == SEED_FIELDS | {
        "tenantId",
        "sourceEventIds",
        "incomplete",
        "incompleteReason",
    }
    assert form["nodeType"] == "MODEL"
    assert form["sourceEventIds"] == list(model.source_event_ids)


def test_json_line_is_one_line_and_round_trips() -> None:
    for record in sample_records():
        line = record.to_json_line()
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert NodeIoRecord.from_json(line) == record


def test_record_id_is_deterministic_for_the_same_events() -> None:
    run = RunEvents()
    events = [*model_step(run, 1), run.call("c1", "calc", {}), run.result("c1", "calc", 2)]
    first = feed_all(NodePairer(), events)
    second = feed_all(NodePairer(), events, partition=3, start_offset=1000)
    assert [r.record_id for r in first] == [r.record_id for r in second]
    assert [r.to_json_line() for r in first] == [r.to_json_line() for r in second]


def test_record_id_depends_on_tenant_node_and_source_events() -> None:
    base = derive_record_id("acme", "model@r|t|1", ["e1", "e2"])
    assert base == derive_record_id("acme", "model@r|t|1", ["e1", "e2"])
    assert base != derive_record_id("globex", "model@r|t|1", ["e1", "e2"])
    assert base != derive_record_id("acme", "model@r|t|2", ["e1", "e2"])
    assert base != derive_record_id("acme", "model@r|t|1", ["e1", "e3"])
    assert base != derive_record_id("acme", "model@r|t|1", ["e1"])


def test_same_run_in_two_tenants_gives_distinct_records() -> None:
    a = feed_all(NodePairer(), model_step(RunEvents(tenant="acme")))
    b = feed_all(NodePairer(), model_step(RunEvents(tenant="globex")))
    assert a[0].node_id == b[0].node_id
    assert a[0].record_id != b[0].record_id


def test_records_are_immutable() -> None:
    model, _ = sample_records()
    with pytest.raises(ValidationError, match="frozen"):
        model.output_text = "changed"
