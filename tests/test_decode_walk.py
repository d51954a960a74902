"""The consumer's depth and non-finite check visits fewer fields than it could (a JSON text
with fewer brackets than the limit cannot be too deep; orjson refuses NaN and Infinity in
text), and that never changes a verdict: for any payload the narrowed walk and the full walk
of every field that may nest accept and refuse alike, for the same reason."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.events import EventCodec, EventError
from runtrail.events.limits import EventLimits
from tests.examples import examples
from tests.poison_corpus import raw_encode
from tests.support import form

CODEC = EventCodec()
LIMIT = 6
LIMITS = EventLimits(max_json_depth=LIMIT)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(alphabet="ab[]{}", max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text("xy", max_size=2), inner, max_size=3)
    ),
    max_leaves=30,
)


def _verdict(walk: Any) -> str:
    try:
        walk()
    except EventError as exc:
        return type(exc).__name__
    return "ok"


def _full(value: bytes) -> None:
    data = CODEC.decode(value).written["data"]
    for name in ("output", "trace"):
        LIMITS.check_value(data.get(name), f"data.{name}", 1)


def _narrowed(value: bytes) -> None:
    decoded = CODEC.decode(value, depth_limit=LIMIT)
    for name in decoded.to_walk:
        LIMITS.check_value(decoded.written["data"].get(name), f"data.{name}", 1)


@settings(max_examples=examples(300), deadline=None)
@given(output=json_values, trace=json_values)
def test_the_narrowed_walk_decides_as_the_full_walk(output: Any, trace: Any) -> None:
    f = form("TOOL_RESULT", data={"callId": "c-1", "output": None, "trace": None})
    texts = {"output": orjson.dumps(output).decode(), "trace": orjson.dumps(trace).decode()}
    value = raw_encode(f, texts)
    assert _verdict(lambda: _narrowed(value)) == _verdict(lambda: _full(value))


def test_a_text_exactly_as_deep_as_the_limit_allows_passes_and_one_deeper_is_refused() -> None:
    f = form("TOOL_RESULT", data={"callId": "c-1", "output": None, "trace": None})
    # data.output is at depth 1: containers down to depth LIMIT - 1 pass, one more does not
    ok = raw_encode(f, {"output": "[" * (LIMIT - 1) + "]" * (LIMIT - 1)})
    deep = raw_encode(f, {"output": "[" * LIMIT + "]" * LIMIT})
    assert _verdict(lambda: _narrowed(ok)) == _verdict(lambda: _full(ok)) == "ok"
    assert _verdict(lambda: _narrowed(deep)) == _verdict(lambda: _full(deep)) == "TooDeep"
