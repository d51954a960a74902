"""``runtrail publish`` parses a line exactly as ``loads_strict`` would, on its fast path too."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.events import loads_strict
from runtrail_tools.cli.publish_cmd import parse_line
from tests.examples import examples

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0, -0.0 is not 0.0 here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return repr(a) == repr(b)


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.text(), _VALUES, max_size=6))
def test_a_line_parses_as_loads_strict_parses_it(obj: dict[str, Any]) -> None:
    for text in (json.dumps(obj), json.dumps(obj, separators=(",", ":"), ensure_ascii=False)):
        try:
            expected = loads_strict(text)
        except ValueError:
            continue  # e.g. a lone surrogate: the fast path must not accept it either
        assert _same(parse_line(text.encode("utf-8", "surrogatepass") + b"\n"), expected)
    try:
        compact = orjson.dumps(obj)
    except TypeError:
        return  # an int beyond 64 bits: orjson cannot write it
    assert _same(parse_line(compact + b"\n"), loads_strict(compact.decode()))


@pytest.mark.parametrize(
    "line",
    [
        b'{"a":1,"a":1}',  # compact, and orjson would keep one of them silently
        b'{"x":{"b":[1],"b":[1]}}\r\n',
    ],
)
def test_a_duplicate_key_is_refused_even_in_compact_text(line: bytes) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        parse_line(line)


def test_big_integers_stay_integers() -> None:
    assert parse_line(b'{"n":123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }
    assert type(parse_line(b'{"n":-0}')["n"]) is int
