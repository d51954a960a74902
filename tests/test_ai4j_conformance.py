"""Conformance with ai4j-agent, the seed documents' own implementation (issue 12).

The same event sequences go through ai4j's real ``IoCaptureAgentListener`` (the Maven harness
in ``tests/ai4j/``, with ai4j's own payload classes and ``JsonlIoCaptureSink``) and through
runtrail's capture: the pairer library, and the real capture service over a real broker, both
for every sequence (and the run ai4j's real runtime emitted). Records must be equal, record for record and in order, after
the field mapping of ``docs/CAPTURE.md`` ("Conformance with ai4j"):

* compared: nodeType, nodeId, runId, sessionId, turnId, step, modelId, inputs, outputText,
  outputs, reasoningText, retryCount, inputTokens, outputTokens;
* not compared: recordId (ai4j: a random UUID; runtrail: UUIDv5 of the source events),
  startedAt/capturedAt/durationMs (ai4j: wall clock at the listener; runtrail: the events'
  occurredAt), tenantId, sourceEventIds, incomplete (runtrail only);
* absent in ai4j's JSONL = null; a missing outputText/reasoningText = ``""``;
* TOOL inputs/outputs: ai4j's ``name`` is runtrail's ``toolName``, absent fields are null.

Each deliberate difference has its own test below, asserting both sides.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtrail.capture import NodeIoRecord, NodePairer
from runtrail.capture.repair import capture_files
from runtrail.events import CURRENT_VERSIONS, validate_json_form
from runtrail.events.ai4j import to_runtrail
from runtrail.events.envelope import Event
from runtrail.events.runtime_events import RUNTIME_TYPES, ToolCall, ToolResult
from tests import ai4j_sequences as seqs
from tests.ai4j_harness import harness
from tests.support import ServiceProcess, create_topic, produce_forms, unique_topic, wait_for

COMPARED = (
    "nodeType",
    "nodeId",
    "runId",
    "sessionId",
    "turnId",
    "step",
    "modelId",
    "inputs",
    "outputText",
    "outputs",
    "reasoningText",
    "retryCount",
    "inputTokens",
    "outputTokens",
)
CALL_FIELDS = tuple(f.serialization_alias or f.alias or n for n, f in ToolCall.model_fields.items())
RESULT_FIELDS = tuple(
    f.serialization_alias or f.alias or n for n, f in ToolResult.model_fields.items()
)
Sequences = dict[str, list[dict[str, Any]]]


# --- the two sides ---------------------------------------------------------------------------
def _tool_json(obj: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(obj, dict):
        return obj
    renamed = {("toolName" if k == "name" else k): v for k, v in obj.items()}
    return {f: renamed.get(f) for f in fields}


def from_ai4j(record: dict[str, Any]) -> dict[str, Any]:
    """ai4j's JSONL record in the compared fields (the mapping above)."""
    out = {k: record.get(k) for k in COMPARED}
    out["outputText"] = out["outputText"] or ""
    out["reasoningText"] = out["reasoningText"] or ""
    if out["nodeType"] == "TOOL":
        out["inputs"] = _tool_json(out["inputs"], CALL_FIELDS)
        out["outputs"] = _tool_json(out["outputs"], RESULT_FIELDS)
    return out


def from_runtrail(record: NodeIoRecord) -> dict[str, Any]:
    data = record.model_dump(by_alias=True)
    assert not data["incomplete"], "conformance compares closed nodes only"
    return {k: data[k] for k in COMPARED}


def runtrail_forms(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runtime-type events as full runtrail forms (per tenant and run sequences)."""
    counters: dict[tuple[str, str], int] = defaultdict(int)
    forms = []
    for i, ev in enumerate(events):
        if ev["type"] not in RUNTIME_TYPES:
            continue  # STEP_START, FINAL_OUTPUT: not runtrail types (ai4j's listener skips them)
        tenant = ev.get("tenant", "acme")
        counters[(tenant, ev["runId"])] += 1
        partial = to_runtrail({k: v for k, v in ev.items() if k != "eventId"})
        forms.append(
            {
                "eventId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"ai4j/{tenant}/{ev['runId']}/{i}")),
                "tenantId": tenant,
                "sequence": str(counters[(tenant, ev["runId"])]),
                "schemaVersion": CURRENT_VERSIONS[ev["type"]],
                "occurredAt": f"2026-12-01T10:00:{i // 1000:02d}.{i % 1000:03d}Z",
                "actor": {"kind": "agent", "id": "ai4j"},
                "correlationId": ev["runId"],
                **partial,
            }
        )
    return forms


def pair(events: list[dict[str, Any]]) -> tuple[list[NodeIoRecord], NodePairer]:
    """The records runtrail's pairer closes for ``events``, and the pairer after them."""
    pairer = NodePairer()
    records: list[NodeIoRecord] = []
    for offset, form in enumerate(runtrail_forms(events)):
        event: Event = validate_json_form(form)
        records.extend(pairer.feed(event, 0, offset, now_ms=0))
    return records, pairer


def pairer_records(events: list[dict[str, Any]]) -> list[NodeIoRecord]:
    return pair(events)[0]


def by_tenant(records: list[NodeIoRecord]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        out[record.tenant_id].append(from_runtrail(record))
    return dict(out)


def split_tenants(sequences: Sequences) -> Sequences:
    """``name/tenant`` -> that tenant's events: one ai4j listener per tenant."""
    out: Sequences = {}
    for name, events in sequences.items():
        for ev in events:
            out.setdefault(f"{name}/{ev.get('tenant', 'acme')}", []).append(ev)
    return out


def emitted_run() -> list[dict[str, Any]]:
    """The run ai4j's real runtime published (duplicate TOOL_CALLs included)."""
    return [{**ev, "tenant": "acme"} for ev in harness().emit()]


ALL: Sequences = {**seqs.basic(), **seqs.edge_cases()}


@pytest.fixture(scope="module")
def ai4j() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per sequence name, per tenant, ai4j's records (mapped); one JVM run for all."""
    inputs = {**ALL, "ai4j_runtime_run": emitted_run()}
    raw = harness().capture(split_tenants(inputs))
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    for key, records in raw.items():
        name, tenant = key.rsplit("/", 1)
        out[name][tenant] = [from_ai4j(r) for r in records]
    return dict(out)


def expected(ai4j: dict[str, dict[str, list[dict[str, Any]]]], name: str) -> dict[str, Any]:
    return {t: r for t, r in ai4j[name].items() if r}


# --- record for record -----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(seqs.basic()))
def test_basic_sequences_match_ai4j(name: str, ai4j: Any) -> None:
    assert by_tenant(pairer_records(ALL[name])) == expected(ai4j, name)


@pytest.mark.parametrize("name", sorted(seqs.edge_cases()))
def test_edge_cases_match_ai4j(name: str, ai4j: Any) -> None:
    assert by_tenant(pairer_records(ALL[name])) == expected(ai4j, name)


def test_the_real_runtime_run_matches_ai4j(ai4j: Any) -> None:
    closed, pairer = pair(emitted_run())
    records = by_tenant(closed)
    assert records == expected(ai4j, "ai4j_runtime_run")
    assert [r["nodeType"] for r in records["acme"]] == ["TOOL", "TOOL", "MODEL", "MODEL"]
    assert pairer.open_nodes() == 0  # the repeated TOOL_CALLs left nothing open


def test_a_duplicate_tool_call_leaves_no_open_node() -> None:
    """ai4j's pending map holds one entry per key, and the result empties it. runtrail must not
    keep a second node open: it would hold the partition's commit for the idle timeout."""
    closed, pairer = pair(ALL["duplicate_tool_call"])
    assert len(closed) == 1
    assert pairer.open_nodes() == 0
    assert pairer.held_offsets() == {}


def test_the_mapping_is_not_vacuous(ai4j: Any) -> None:
    """Every compared field is populated by some ai4j record, so a blind spot would show."""
    seen = {
        k
        for runs in ai4j.values()
        for recs in runs.values()
        for r in recs
        for k, v in r.items()
        if v not in (None, "", 0)
    }
    assert seen == set(COMPARED)


# --- the deliberate differences (docs/CAPTURE.md) --------------------------------------------
DIFF = seqs.differences()


@pytest.fixture(scope="module")
def one_listener() -> dict[str, list[dict[str, Any]]]:
    """ai4j's raw records of each difference sequence, one listener each (one JVM run)."""
    return harness().capture(DIFF)


def test_difference_repeated_call_id_pairs_first_in_first_out(one_listener: Any) -> None:
    """ai4j's pending map keeps only the last call of a key: call 1 is lost, its result is
    paired with call 2's arguments, and result 2 becomes an orphan. runtrail pairs FIFO, so
    no call is lost and none is paired with another's result."""
    theirs = [from_ai4j(r) for r in one_listener["fifo"]]
    assert [(r["inputs"] or {}).get("arguments") for r in theirs] == ['{"n":2}', None]
    ours = by_tenant(pairer_records(DIFF["fifo"]))["acme"]
    assert [(r["inputs"]["arguments"], r["outputs"]["output"]) for r in ours] == [
        ('{"n":1}', "one"),
        ('{"n":2}', "two"),
    ]


def test_difference_tenants_never_share_a_node(ai4j: Any, one_listener: Any) -> None:
    """ai4j has no tenant: one listener fed two tenants' run ``run-shared`` merges them. runtrail
    scopes every key by tenant, which equals one ai4j listener per tenant."""
    model = next(r for r in one_listener["mixed"] if r["nodeType"] == "MODEL")
    assert (model["outputText"], model["inputs"]["model"]) == ("acmeglobex", "m-globex")
    ours = by_tenant(pairer_records(DIFF["mixed"]))
    assert ours == expected(ai4j, "two_tenants")
    assert [r["outputText"] for r in ours["acme"] if r["nodeType"] == "MODEL"] == ["acme"]


def test_difference_an_empty_raw_does_not_replace_outputs(one_listener: Any) -> None:
    """Seed 000: "only the latest non-empty raw payload is kept". ai4j's code keeps any
    non-null payload, so a trailing ``{}`` replaces the provider's response; runtrail
    follows the seed's text."""
    assert [r["outputs"] for r in one_listener["empty_raw"]] == [{}]
    assert [r.outputs for r in pairer_records(DIFF["empty_raw"])] == [seqs.usage(3, 1)]


def test_difference_retries_survive_a_restarting_request(one_listener: Any) -> None:
    """A second MODEL_REQUEST restarts the node in both; ai4j's new builder starts at
    retryCount 0, runtrail keeps the step's count (its SDK re-sends the request after a
    failed stream, so the retry belongs to the call that follows)."""
    assert [r.get("retryCount") for r in one_listener["retry_then_request"]] == [0]
    assert [r.retry_count for r in pairer_records(DIFF["retry_then_request"])] == [1]


def test_difference_a_usage_value_that_is_no_count_loses_only_its_slot(one_listener: Any) -> None:
    """fastjson2 throws on a non-numeric count and ai4j's listener swallows it: both slots of
    that raw are lost. runtrail drops only the unreadable slot."""
    theirs = one_listener["usage_not_a_count"]
    assert [(r.get("inputTokens"), r.get("outputTokens")) for r in theirs] == [(None, None)]
    ours = pairer_records(DIFF["usage_not_a_count"])
    assert [(r.input_tokens, r.output_tokens) for r in ours] == [(None, 5)]


def test_difference_an_empty_call_id_falls_back_to_the_tool_name(one_listener: Any) -> None:
    """ai4j keys by any non-null callId, so ``""`` is a key of its own; runtrail treats an empty
    ID as absent and falls back to the tool name, like a missing one."""
    assert [r["nodeId"] for r in one_listener["empty_call_id"]] == ["tool@run-emptyid|turn-1|0|"]
    ours = pairer_records(DIFF["empty_call_id"])
    assert [r.node_id for r in ours] == ["tool@run-emptyid|turn-1|0|w"]


def test_difference_sequence_order_not_arrival_order(ai4j: Any, one_listener: Any) -> None:
    """ai4j pairs in listener-call order; runtrail in each run's ``sequence`` order, so events
    a topic delivers out of order form the records ai4j forms from the events in order."""
    assert one_listener["arrival_order"][0]["outputText"] == "is It 21C."
    forms = runtrail_forms(ALL["streamed_deltas"])
    swapped = [forms[0], forms[2], forms[1], *forms[3:]]  # the same two deltas swapped
    pairer = NodePairer()
    records: list[NodeIoRecord] = []
    for offset, form in enumerate(swapped):
        records.extend(pairer.feed(validate_json_form(form), 0, offset, now_ms=0))
    assert by_tenant(records) == expected(ai4j, "streamed_deltas")


# --- the capture service on a real broker ----------------------------------------------------
@pytest.mark.kafka
def test_the_capture_service_writes_what_ai4j_captures(
    kafka_bootstrap: str, tmp_path: Path, ai4j: Any
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("ai4j-capture"), partitions=2)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=2)
    every = {**ALL, "ai4j_runtime_run": emitted_run()}
    names = sorted(every)
    forms = [f for name in names for f in runtrail_forms(every[name])]
    produce_forms(kafka_bootstrap, topic, forms)
    want = {name: expected(ai4j, name) for name in names}
    total = sum(len(recs) for runs in want.values() for recs in runs.values())
    root = tmp_path / "capture"
    proc = ServiceProcess(
        "capture",
        kafka_bootstrap,
        topic,
        group=f"g-{topic}",
        options={"sink_url": root.as_uri(), "idle_flush_s": "86400"},
        log_path=tmp_path / "capture.log",
    )

    def written() -> list[NodeIoRecord]:
        lines = []
        for path in capture_files(root):
            with path.open("rb") as handle:
                lines.extend(line for line in handle if line.endswith(b"\n"))
        return [NodeIoRecord.model_validate(orjson.loads(line)) for line in lines]

    try:
        wait_for(lambda: len(written()) >= total, 90, what="every record on disk")
        time.sleep(0.5)  # anything extra would show up now
        assert proc.terminate() == 0
    finally:
        proc.close()
    records = written()
    assert len(records) == total
    runs = {ev["runId"]: name for name in names for ev in every[name]}
    got: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in names}
    # within one (tenant, run) the files keep stream order; sort by the first source event
    order = {f["eventId"]: i for i, f in enumerate(forms)}
    for record in sorted(records, key=lambda r: order[r.source_event_ids[-1]]):
        got[runs[record.run_id]].setdefault(record.tenant_id, []).append(from_runtrail(record))
    assert got == want
