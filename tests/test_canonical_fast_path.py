"""The fast canonical path is byte-for-byte the RFC 8785 reference on any JSON value."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.events.jsonform import canonical_bytes as canonical_json
from runtrail.events.jsonform import canonical_bytes_reference as canonical_bytes
from tests.examples import examples

numbers = (
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, -0.0, 1.0, 1e-4, 9.99e-5, 1e-5, 1e-6, 0.2, 1e16, 1e21, 1e22, 5e-324])
)
text = st.text() | st.sampled_from(["\u2028", "\x7f", "\U0001f600", "\ue000", "a\x00b"])
json_values = st.recursive(
    st.none() | st.booleans() | numbers | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(400), deadline=None)
@given(json_values)
def test_fast_path_equals_the_reference(value: Any) -> None:
    assert canonical_json(value) == canonical_bytes(value)


def test_keys_beyond_the_bmp_sort_by_utf16_code_units() -> None:
    value = {"\U0001f600": 1, "\uff61": 2}
    assert canonical_json(value) == canonical_bytes(value)
    assert canonical_json(value).index("\uff61".encode()) > canonical_json(value).index(
        "\U0001f600".encode()
    )


def _outcome(value: Any, canonical: Any) -> Any:
    try:
        return canonical(value)
    except Exception as exc:  # the reference refuses what JCS cannot express; so must we
        return type(exc).__name__


wide = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**60), max_value=2**60) | numbers | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(400), deadline=None)
@given(wide)
def test_integers_beyond_2_53_anywhere_are_decided_by_the_reference(value: Any) -> None:
    assert _outcome(value, canonical_json) == _outcome(value, canonical_bytes)


def test_an_unsafe_integer_inside_a_list_or_an_object_is_not_taken_by_the_fast_path() -> None:
    for value in ([1, [2, 2**53]], {"a": {"b": -(2**53)}}, [{"x": [1.0]}], {"k": [1e-5]}):
        assert _outcome(value, canonical_json) == _outcome(value, canonical_bytes)
