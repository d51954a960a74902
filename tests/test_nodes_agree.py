"""Capture and resume-cache form the same nodes from the same stream (issue 14 item 3).

Both consume :mod:`runtrail.nodes.assembly`; these tests feed one event stream to a
:class:`NodePairer` and an :class:`EntryBuilder` and check that every capture record and every
cache entry tell of the same node: same pairing, same text and raw, same gap verdicts.
"""

from __future__ import annotations

from typing import Any

from runtrail.capture import NodeIoRecord, NodePairer
from runtrail.events import Event
from runtrail.nodes import RunSequencer
from runtrail.resume.builder import EntryBuilder, EntryKey, WriteBatch
from runtrail.resume.entry import CacheEntry
from runtrail.resume.keys import Kind, model_key, tool_key
from tests.capture_support import RunEvents, drain, feed_all, prompt
from tests.node_order_support import disorder, long_run


def both(
    events: list[Event], window: int = 1000
) -> tuple[list[NodeIoRecord], dict[EntryKey, CacheEntry], NodePairer, EntryBuilder]:
    pairer = NodePairer(clock=lambda: 0, window=window)
    records = feed_all(pairer, events) + drain(pairer)
    builder = EntryBuilder(RunSequencer(window=window))
    out = WriteBatch()
    for offset, event in enumerate(events):
        builder.feed(event, 0, out, offset)
    builder.expire(3_600_000, out)
    return records, out.entries, pairer, builder


def expected_entries(records: list[NodeIoRecord]) -> dict[tuple[Kind, str], Any]:
    """What the cache must hold, derived from capture's records alone."""
    expected: dict[tuple[Kind, str], Any] = {}
    for record in records:
        if record.node_type == "MODEL":
            answered = record.output_text != "" or record.outputs is not None
            if answered and not record.incomplete:
                result = {"message": record.output_text or None, "raw": record.outputs}
                expected.setdefault((Kind.MODEL, model_key(record.inputs)), result)
        elif record.inputs is not None and record.inputs.get("toolName") is not None:
            outputs = record.outputs
            if outputs.get("error") is None and outputs.get("failed") is not True:
                key = tool_key(record.inputs["toolName"], record.inputs.get("arguments"))
                expected.setdefault((Kind.TOOL, key), outputs.get("output"))
    return expected


def actual_entries(entries: dict[EntryKey, CacheEntry]) -> dict[tuple[Kind, str], Any]:
    return {(kind, key): entry.result for (_, _, kind, key), entry in entries.items()}


def test_a_long_disordered_run_forms_the_same_nodes_in_capture_and_the_cache() -> None:
    events = long_run(3_000)
    arrival = disorder(events, gaps=60, swaps=90, delay=700).arrival
    records, entries, pairer, builder = both(arrival, window=50)
    assert any(r.incomplete for r in records), "the stream must exercise gaps"
    assert any(r.node_type == "TOOL" for r in records)
    assert actual_entries(entries) == expected_entries(records)
    assert pairer.open_nodes() == builder.nodes.open_count()
    assert builder.dropped["sequence-gap"] > 0
    assert builder.dropped["late"] == pairer.dropped["late"] > 0


def test_tools_said_twice_failed_orphaned_or_sharing_a_key_pair_alike() -> None:
    run = RunEvents()
    events = [
        run.request(prompt(text="look twice")),
        run.response("Looking", {"id": "r1", "usage": {"prompt_tokens": 4}}),
        run.call("c1", "search", {"q": "a"}),
        run.call("c1", "search", {"q": "a"}),  # the same call said twice
        run.call(None, "lookup", {"k": 1}),  # two calls under one key: first in, first out
        run.call(None, "lookup", {"k": 2}),
        run.result("c1", "search", "hit a"),
        run.result(None, "lookup", "one"),
        run.result(None, "lookup", "two"),
        run.call("c2", "charge", {"amount": 5}),
        run.result("c2", "charge", None, error="declined"),  # failed: not cached
        run.result("c9", "orphan", "no call"),  # no call: no input, nothing cached
        run.call("c3", None, {"x": 1}),  # no tool name: nothing to key it by
        run.result("c3", None, "nameless"),
        run.step_end(),
    ]
    records, entries, pairer, builder = both(events)
    tools = [r for r in records if r.node_type == "TOOL"]
    assert [(r.inputs and r.inputs["arguments"], r.outputs["output"]) for r in tools] == [
        ({"q": "a"}, "hit a"),
        ({"k": 1}, "one"),
        ({"k": 2}, "two"),
        ({"amount": 5}, None),
        (None, "no call"),
        ({"x": 1}, "nameless"),
    ]
    assert actual_entries(entries) == expected_entries(records)
    assert len(entries) == 4  # the model call and three successful named tool calls
    assert pairer.open_nodes() == builder.nodes.open_count() == 0


def test_retries_agree_and_a_superseded_answered_call_is_the_one_documented_difference() -> None:
    run = RunEvents()
    events = [
        run.request(prompt(text="retry me")),
        run.response("bro", None),
        run.retry(1, "stream broke"),
        run.request(prompt(text="retry me")),  # runtrail's SDK re-sends the request
        run.response("whole", {"id": "r2"}),
        run.step_end(),
        run.request(prompt(text="first call"), step=2),
        run.response("first", None, step=2),
        run.request(prompt(text="second call"), step=2),
        run.response("second", None, step=2),
        run.step_end(step=2),
    ]
    records, entries, pairer, _ = both(events)
    assert [(r.output_text, r.retry_count) for r in records] == [("whole", 1), ("second", 0)]
    actual = actual_entries(entries)
    # capture records what ai4j records: the restarted call is dropped and counted ...
    assert pairer.dropped["superseded-request"] == 5
    # ... while the cache also keeps the first, different, answered call of step 2
    first = (Kind.MODEL, model_key(prompt(text="first call")))
    assert actual.pop(first) == {"message": "first", "raw": None}
    assert actual == expected_entries(records)
