"""The capture pairer follows ai4j's IoCaptureAgentListener on the cases issue 12 found.

Each test failed before runtrail.nodes: the duplicate TOOL_CALL opened a node that never
closed (and held the partition's offset until idle expiry), and ``""`` then ``"x"`` gave
``"\\nx"``. (No-open-request drops, request restarts and per-slot tokens are in
test_capture_pairer.py and test_capture_tokens.py.)
"""

from __future__ import annotations

from runtrail.capture import NodePairer
from tests.capture_support import RunEvents, feed_all, prompt


def test_an_identical_duplicate_tool_call_is_the_same_node_and_holds_nothing_after() -> None:
    run = RunEvents()
    pairer = NodePairer()
    call = run.call("toolu_1", "search", '{"q": "kafka"}')
    again = run.call("toolu_1", "search", '{"q": "kafka"}')  # ai4j's Anthropic stream
    result = run.result("toolu_1", "search", "found")
    [record] = feed_all(pairer, [call, again, result])
    assert record.inputs == {
        "callId": "toolu_1",
        "toolName": "search",
        "arguments": '{"q": "kafka"}',
        "type": None,
    }
    assert record.outputs["output"] == "found"
    assert record.source_event_ids == (call.event_id, again.event_id, result.event_id)
    assert pairer.open_nodes() == 0
    assert pairer.holds() == {}  # no node left to hold the offset for idle_flush_s


def test_a_repeated_call_id_with_other_arguments_is_a_second_call_paired_fifo() -> None:
    """A documented difference: ai4j would overwrite the first pending call."""
    run = RunEvents()
    events = [
        run.call("c1", "calc", {"e": "1+1"}),
        run.call("c1", "calc", {"e": "2+2"}),
        run.result("c1", "calc", 2),
        run.result("c1", "calc", 4),
    ]
    records = feed_all(NodePairer(), events)
    assert [(r.inputs["arguments"]["e"], r.outputs["output"]) for r in records] == [
        ("1+1", 2),
        ("2+2", 4),
    ]


def test_anonymous_identical_calls_stay_two_calls() -> None:
    """Without a callId two equal calls are legitimately two (e.g. the same lookup twice)."""
    run = RunEvents()
    events = [
        run.call(None, "now", {}),
        run.call(None, "now", {}),
        run.result(None, "now", "t1"),
        run.result(None, "now", "t2"),
    ]
    assert len(feed_all(NodePairer(), events)) == 2


def test_empty_reasoning_segments_are_not_joined() -> None:
    run = RunEvents()
    events = [
        run.request(prompt()),
        run.reasoning(""),
        run.reasoning("x"),
        run.reasoning(""),
        run.reasoning("y"),
        run.response("", None),
        run.response("ok", None),
        run.step_end(),
    ]
    [record] = feed_all(NodePairer(), events)
    assert record.reasoning_text == "x\ny"
    assert record.output_text == "ok"


def test_a_second_request_never_mixes_two_calls_in_one_record() -> None:
    run = RunEvents()
    raw_one = {"id": "one", "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
    events = [
        run.request(prompt(text="first")),
        run.response("one", raw_one),
        run.request(prompt(text="second")),
        run.response("two", {"id": "two"}),
        run.step_end(),
    ]
    pairer = NodePairer()
    [record] = feed_all(pairer, events)
    assert record.inputs == prompt(text="second")
    assert (record.output_text, record.outputs) == ("two", {"id": "two"})
    assert (record.input_tokens, record.output_tokens) == (None, None)  # call 1's usage is not ours
    assert pairer.dropped == {"superseded-request": 2}
