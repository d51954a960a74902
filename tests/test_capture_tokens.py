"""Token counts on capture records (the parser itself: tests/test_node_tokens.py)."""

from __future__ import annotations

from runtrail.capture import NodePairer
from tests.capture_support import RunEvents, feed_all, prompt


def test_model_record_tokens_come_from_the_kept_raw_and_a_real_zero_is_kept() -> None:
    run = RunEvents()
    events = [
        run.request(prompt()),
        run.response("", {"usage": {"promptTokens": 11, "completionTokens": 0}}),
        run.step_end(),
    ]
    [record] = feed_all(NodePairer(), events)
    assert (record.input_tokens, record.output_tokens) == (11, 0)


def test_model_record_without_usage_has_null_tokens() -> None:
    run = RunEvents()
    events = [run.request(prompt()), run.response("hi", {"id": "r"}), run.step_end()]
    [record] = feed_all(NodePairer(), events)
    assert (record.input_tokens, record.output_tokens) == (None, None)
    form = record.model_dump(mode="json", by_alias=True)
    assert form["inputTokens"] is None and form["outputTokens"] is None


def test_tokens_keep_the_last_value_seen_per_slot() -> None:
    """ai4j sets a slot whenever a response reports it; a later raw without usage keeps it."""
    run = RunEvents()
    events = [
        run.request(prompt()),
        run.response("a", {"type": "start", "usage": {"input_tokens": 30}}),
        run.response("b", {"type": "delta", "usage": {"output_tokens": 5}}),
        run.response("c", {"type": "stop"}),  # no usage: nothing is reset
        run.step_end(),
    ]
    [record] = feed_all(NodePairer(), events)
    assert (record.input_tokens, record.output_tokens) == (30, 5)
    assert record.outputs == {"type": "stop"}
