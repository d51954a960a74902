"""Whole numbers written as text by others: ASCII digits only, within 64 bits; anything else
is None, never an exception (``"²".isdigit()`` is true and ``int("²")`` raises)."""

from __future__ import annotations

import pytest

from runtrail.adapters.otel_conventions.openinference import _indexed
from runtrail.sessions.session import UntrustedSnapshot, _coordinates
from runtrail.whole_numbers import MAX_INT64, signed_number, whole_number
from runtrail_tools.ui.live import parse_position
from runtrail_tools.ui.paging import TimelineQuery


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0", 0),
        ("42", 42),
        ("007", 7),
        (str(MAX_INT64), MAX_INT64),
        (str(MAX_INT64 + 1), None),
        ("9" * 5000, None),  # int() refuses more than 4,300 digits
        ("²", None),
        ("١٢", None),  # Arabic-Indic digits: int() reads 12
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1.0", None),
        ("", None),
        (None, None),
    ],
)
def test_only_ascii_digits_within_64_bits_are_a_whole_number(
    text: str | None, number: int | None
) -> None:
    assert whole_number(text) == number


def test_a_sign_is_one_leading_minus() -> None:
    assert [signed_number(t) for t in ("-3", "3", "--3", "-²", "-")] == [-3, 3, None, None, None]


def test_an_attribute_index_in_other_digits_is_not_an_index() -> None:
    attributes = {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.².message.role": "x",
    }
    assert _indexed(attributes, "llm.input_messages") == [{"message.role": "user"}]


def test_a_snapshot_sequence_in_other_digits_is_untrusted() -> None:
    with pytest.raises(UntrustedSnapshot):
        _coordinates({"runId": "r", "sequence": "²"})
    assert _coordinates({"runId": "r", "sequence": "12"}) == ("r", 12)


def test_the_explorer_reads_positions_and_pages_without_raising() -> None:
    assert parse_position("²:1") is None and parse_position("1:--2") is None
    assert parse_position("1:-1") == (1, -1)
    query = TimelineQuery.of({"page": "²", "step": "--3"}, [])
    assert (query.page, query.step) == (0, None)
