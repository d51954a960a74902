"""Decoded events built without pydantic are exactly what pydantic validation gives.

The builder may refuse what pydantic accepts (the codec then validates with pydantic), never
accept what pydantic refuses or build something else: held on every fixture, each decoded
through the codec, and on random changes to their fields.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.events import EventCodec, InvalidEvent, validate_json_form
from runtrail.events.codec import validate_decoded
from runtrail.events.envelope import EVENT_CLASSES, Event
from runtrail.events.trusted import NotTrusted, model_builder
from runtrail.events.upcasting import upcast
from tests.support import fixture_forms

CODEC = EventCodec()
#: every fixture as the consumer sees it: encoded, decoded by its writer schema, upcast
DECODED = {
    key: upcast(CODEC.decode_written(CODEC.encode_json_form(form)))
    for key, form in fixture_forms().items()
}


def _built(form: dict[str, Any]) -> Event | None:
    build = model_builder(EVENT_CLASSES[(form["type"], form["schemaVersion"])])
    assert build is not None
    try:
        return build(form)  # type: ignore[no-any-return]
    except NotTrusted:
        return None


def _same(built: Event, validated: Event) -> None:
    assert type(built) is type(validated) and type(built.data) is type(validated.data)
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert built.json_form() == validated.json_form()
    assert built.model_fields_set == validated.model_fields_set


@pytest.mark.parametrize("key", sorted(DECODED), ids=lambda k: f"{k[0]}.v{k[1]}")
def test_every_fixture_is_built_as_pydantic_validates_it(key: tuple[str, int]) -> None:
    form = DECODED[key]
    built = _built(form)
    assert built is not None, "a valid decoded fixture should not need pydantic"
    _same(built, validate_json_form(form))
    _same(validate_decoded(form), validate_json_form(form))


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from(
        [
            "",
            " ",
            "\t",
            "\x1c",
            "\u00a0",
            "x",
            "x\n",
            "5",
            "05",
            "-1",
            "0",
            "1_0",
            " 7",
            "agent",
            "operator",
            "nobody",
            "provider",
            "estimated",
            "2026-11-29T10:15:30Z",
            "2026-11-29T10:15:30.250Z",
            "2026-11-29T10:15:30.250+02:00",
            "2026-11-29T10:15:30.250Z\n",
            "2026-11-29 10:15:30Z",
            "2026-11-29T10:15:30.1234567890Z",
            "\uff12\uff10\uff12\uff16-11-29T10:15:30Z",  # full-width digits: \\d in Unicode
        ]
    ),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _paths(form: dict[str, Any]) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for key, value in form.items():
        paths.append((key,))
        if isinstance(value, dict) and key in ("actor", "data"):
            paths.extend((key, inner) for inner in value)
    return paths


@settings(max_examples=600, deadline=None)
@given(data=st.data())
def test_a_changed_field_is_never_accepted_where_pydantic_refuses(data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(DECODED)))
    form = copy.deepcopy(DECODED[key])
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(_paths(form)))
        target = form if len(path) == 1 else form[path[0]]
        action = data.draw(st.sampled_from(["set", "set", "set", "drop", "extra"]))
        if action == "set":
            target[path[-1]] = data.draw(VALUES)
        elif action == "drop":
            target.pop(path[-1], None)
        elif isinstance(target, dict):
            target[data.draw(st.sampled_from(["name", "tool_name", "extra", "event_id"]))] = 1
    current = (DECODED[key]["type"], DECODED[key]["schemaVersion"])
    if (form.get("type"), form.get("schemaVersion")) != current:
        return  # another class's form: the codec picks the class by these two
    built = _built(form)
    try:
        validated = validate_json_form(form)
    except InvalidEvent:
        assert built is None, f"built an event pydantic refuses: {form}"
        with pytest.raises(InvalidEvent):
            validate_decoded(form)  # and the codec reports pydantic's reason
        return
    if built is not None:
        _same(built, validated)
    _same(validate_decoded(form), validated)
