"""The one token parser (capture and projection), decided case by case after ai4j.

Each expectation below was checked against ai4j's ``IoCaptureAgentListener.extractUsage``
with fastjson2 2.0.43 (the seed's own code); the six cases the two old parsers disagreed on
are named.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtrail.capture.tokens import parse_usage as capture_parser
from runtrail.nodes.tokens import keep_last, parse_usage
from runtrail.projection.usage import raw_usage as projection_parser


def test_capture_and_projection_use_the_same_parser() -> None:
    assert capture_parser is parse_usage
    assert projection_parser is parse_usage


@pytest.mark.parametrize(
    ("input_key", "output_key"),
    [
        ("prompt_tokens", "completion_tokens"),
        ("promptTokens", "completionTokens"),
        ("input", "output"),
        ("input_tokens", "output_tokens"),
    ],
)
def test_the_four_spellings_of_each_slot(input_key: str, output_key: str) -> None:
    assert parse_usage({"id": "r", "usage": {input_key: 21, output_key: 8}}) == (21, 8)
    assert parse_usage({"usage": {input_key: 5}}) == (5, None)
    assert parse_usage({"usage": {output_key: 6}}) == (None, 6)


@pytest.mark.parametrize(
    ("case", "raw", "expected"),
    [
        ("message.usage", {"message": {"usage": {"input_tokens": 30}}}, (None, None)),
        ("top-level keys", {"prompt_tokens": 4, "completion_tokens": 2}, (None, None)),
        ("inputTokens", {"usage": {"inputTokens": 3, "outputTokens": 1}}, (None, None)),
        ("12.0", {"usage": {"prompt_tokens": 12.0, "completion_tokens": 12.7}}, (12, 12)),
        ('"12"', {"usage": {"prompt_tokens": "12", "completion_tokens": "12.5"}}, (12, 12)),
        ("JSON text", '{"usage": {"prompt_tokens": 3, "completion_tokens": 1}}', (None, None)),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "",
)
def test_the_six_disputed_cases_follow_ai4j(case: str, raw: Any, expected: Any) -> None:
    assert parse_usage(raw) == expected, case


def test_a_real_zero_stays_zero_and_absent_is_none() -> None:
    assert parse_usage({"usage": {"prompt_tokens": 0, "completion_tokens": 0}}) == (0, 0)
    assert parse_usage({"usage": {"prompt_tokens": 0}}) == (0, None)
    assert parse_usage({"usage": {}}) == (None, None)
    assert parse_usage({"id": "no usage"}) == (None, None)


@pytest.mark.parametrize("raw", [None, "", "plain text", 42, [1, 2], {"usage": "n/a"}])
def test_payloads_without_a_usage_object_give_none(raw: Any) -> None:
    assert parse_usage(raw) == (None, None)


def test_null_and_empty_values_fall_through_to_the_next_spelling() -> None:
    raw = {"usage": {"prompt_tokens": None, "promptTokens": "", "input": "null", "input_tokens": 9}}
    assert parse_usage(raw) == (9, None)


def test_a_negative_count_is_absent_and_stops_the_search() -> None:
    assert parse_usage({"usage": {"prompt_tokens": -5, "input_tokens": 9}}) == (None, None)


@pytest.mark.parametrize("bad", [True, "lots", " 12 ", [1], {"n": 1}, "[REDACTED]"])
def test_a_value_that_is_no_count_makes_only_its_slot_absent(bad: Any) -> None:
    """fastjson2 throws and ai4j loses both slots; a redacted count must not erase the other."""
    assert parse_usage({"usage": {"prompt_tokens": bad, "input_tokens": 4, "output": 3}}) == (
        None,
        3,
    )


def test_usage_given_as_json_text_is_read_as_fastjson2_does() -> None:
    assert parse_usage({"usage": '{"prompt_tokens": 3}'}) == (3, None)


def test_huge_counts_saturate_like_a_java_long() -> None:
    assert parse_usage({"usage": {"prompt_tokens": 1e30}}) == (2**63 - 1, None)


def test_keep_last_keeps_each_slot_until_a_new_value_arrives() -> None:
    assert keep_last((None, None), (30, None)) == (30, None)
    assert keep_last((30, None), (None, 5)) == (30, 5)
    assert keep_last((30, 5), (None, None)) == (30, 5)
    assert keep_last((30, 5), (31, 0)) == (31, 0)
