"""The publisher's limits check skips the walk when one compiled pass (plain JSON types, finite
floats, nested less deep than the limit) shows no limit can be crossed; that never changes a
verdict: for any value, ``check_form`` accepts and refuses exactly as the walk, with the same
message."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.events import EventError
from runtrail.events import limits as limits_module
from runtrail.events.limits import EventLimits
from tests.examples import examples

LIMITS = EventLimits(max_json_depth=5)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet="ab[]{}", max_size=4)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=2).map(tuple)
        | st.dictionaries(st.text("xy", max_size=2), inner, max_size=3)
    ),
    max_leaves=25,
)


def _verdict(check: Any) -> str:
    try:
        check()
    except EventError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@settings(max_examples=examples(400), deadline=None)
@given(value=json_values)
def test_the_shortcut_decides_as_the_walk(value: Any) -> None:
    form = {"type": "TOOL_RESULT", "data": {"output": value}}
    assert _verdict(lambda: LIMITS.check_form(form)) == _verdict(lambda: LIMITS.check_value(form))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_is_refused(bad: float) -> None:
    form = {"data": {"scores": [0.5, {"x": bad}]}}
    with pytest.raises(EventError, match=r"data\.scores\[1\]\.x is"):
        LIMITS.check_form(form)


def test_as_deep_as_the_limit_passes_one_deeper_is_refused_and_5000_deep_is_measured() -> None:
    def nested(depth: int) -> dict[str, Any]:
        value: Any = 1
        for _ in range(depth):
            value = [value]
        return {"data": value}

    LIMITS.check_form(nested(4))  # the event, then four lists: levels 0 to 4
    for depth in (5, 5000):
        with pytest.raises(EventError, match="nested deeper than 5 levels"):
            LIMITS.check_form(nested(depth))


def test_a_plain_event_skips_the_walk_and_one_nested_past_the_limit_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert limits_module._plain_within is not None, "the suite runs with runtrail_native"
    walked: list[Any] = []
    monkeypatch.setattr(EventLimits, "check_value", lambda self, value: walked.append(value))
    plain = {"data": {"a": [1, "x", {"b": [0.25]}], "c": None}}  # levels 0 to 4
    LIMITS.check_form(plain)
    assert walked == []
    deep = {"data": {"a": [[{"b": []}]]}}  # the last list at level 5: the walk decides
    LIMITS.check_form(deep)
    assert walked == [deep]
    monkeypatch.setattr(limits_module, "_plain_within", None)  # without runtrail_native
    LIMITS.check_form(plain)
    assert walked == [deep, plain]
