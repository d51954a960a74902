"""Token counts from the raw payload's usage block (seed 000 §1.3)."""

from __future__ import annotations

from typing import Any

import pytest

from runtrail.capture import NodePairer, parse_usage
from tests.capture_support import RunEvents, feed_all, prompt


@pytest.mark.parametrize(
    ("input_key", "output_key"),
    [
        ("prompt_tokens", "completion_tokens"),
        ("promptTokens", "completionTokens"),
        ("input", "output"),
        ("input_tokens", "output_tokens"),
    ],
)
@pytest.mark.parametrize("nested", [True, False], ids=["in-usage", "top-level"])
def test_all_eight_key_spellings_are_accepted(
    input_key: str, output_key: str, nested: bool
) -> None:
    counts = {input_key: 21, output_key: 8}
    raw: dict[str, Any] = {"id": "r", "usage": counts} if nested else {"id": "r", **counts}
    assert parse_usage(raw) == (21, 8)


@pytest.mark.parametrize("input_key", ["prompt_tokens", "promptTokens", "input", "input_tokens"])
def test_each_input_spelling_alone(input_key: str) -> None:
    assert parse_usage({"usage": {input_key: 5}}) == (5, None)


@pytest.mark.parametrize(
    "output_key", ["completion_tokens", "completionTokens", "output", "output_tokens"]
)
def test_each_output_spelling_alone(output_key: str) -> None:
    assert parse_usage({"usage": {output_key: 6}}) == (None, 6)


def test_a_real_zero_stays_zero_and_absent_is_none() -> None:
    assert parse_usage({"usage": {"prompt_tokens": 0, "completion_tokens": 0}}) == (0, 0)
    assert parse_usage({"usage": {"prompt_tokens": 0}}) == (0, None)
    assert parse_usage({"usage": {}}) == (None, None)
    assert parse_usage({"id": "no usage"}) == (None, None)


@pytest.mark.parametrize("raw", [None, "", "plain text", 42, [1, 2], {"usage": "n/a"}])
def test_payloads_without_usage_give_none(raw: Any) -> None:
    assert parse_usage(raw) == (None, None)


def test_malformed_counts_are_absent_not_errors() -> None:
    raw = {"usage": {"prompt_tokens": "lots", "completion_tokens": -1, "input_tokens": True}}
    assert parse_usage(raw) == (None, None)


def test_usage_block_wins_over_top_level_keys() -> None:
    raw = {"input": "the user's text", "usage": {"input_tokens": 7, "output_tokens": 2}}
    assert parse_usage(raw) == (7, 2)


def test_a_json_string_payload_is_parsed() -> None:
    assert parse_usage('{"usage": {"prompt_tokens": 3, "completion_tokens": 1}}') == (3, 1)


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
