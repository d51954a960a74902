"""The record's JSON form, its identifiers, and determinism under reprocessing."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from runtrail.capture import NodeIoRecord, NodePairer, derive_record_id
from tests.capture_support import RunEvents, feed_all, model_step, sample_records
from tests.examples import examples

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


def test_record_id_is_the_uuid5_of_tenant_node_and_events() -> None:
    """The hand-written UUIDv5 gives exactly the standard library's IDs (ever written ones)."""
    import uuid

    from runtrail.capture.record import RECORD_NAMESPACE

    for tenant, node, ids in [
        ("acme", "model@r|t|1", ["e1", "e2"]),
        ("ü-tenant", "tool@r||3|call-é", []),
        ("", "", ["x" * 500]),
    ]:
        expected = str(uuid.uuid5(RECORD_NAMESPACE, "\n".join((tenant, node, *ids))))
        assert derive_record_id(tenant, node, ids) == expected


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=examples(300), deadline=None)
@given(inputs=JSON_VALUES, outputs=JSON_VALUES, text=st.text(), big=st.integers())
def test_json_line_is_the_bytes_pydantic_writes(
    inputs: object, outputs: object, text: str, big: int
) -> None:
    """orjson writes the line; it must be byte for byte pydantic's ``model_dump_json``."""
    model, _tool = sample_records()
    for record in (
        model.model_copy(update={"inputs": inputs, "outputs": outputs, "output_text": text}),
        model.model_copy(update={"inputs": {"big": big}}),  # beyond 64 bits: the fallback
    ):
        assert record.to_json_line() == record.model_dump_json(by_alias=True).encode() + b"\n"


def test_pairer_records_equal_validated_records() -> None:
    """The pairer builds records without validation: they are what validation would give."""
    for record in sample_records():
        validated = NodeIoRecord.model_validate(record.model_dump())
        assert validated == record
        assert validated.to_json_line() == record.to_json_line()
    with pytest.raises(TypeError, match="every field"):
        NodeIoRecord.trusted(record_id="x")


@given(st.integers(-(10**13), 10**13))
def test_the_cached_capture_date_is_the_date_of_the_instant(ms: int) -> None:
    """``utc_date`` keeps one string per day (it names every record's folder); it must
    still be that instant's own UTC date, on either side of midnight and before 1970."""
    from datetime import UTC, datetime, timedelta

    from runtrail.capture.times import utc_date

    expected = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).strftime("%Y-%m-%d")
    assert utc_date(ms) == expected
