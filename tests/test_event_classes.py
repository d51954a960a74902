"""``Event(...)`` and ``Event.model_validate`` build the concrete class of (type, version).

What the envelope promised with its old metaclass, kept on public API (issue 14 item 6).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from runtrail.events import Actor, Event, InvalidEvent, UnknownEventType, validate_json_form
from runtrail.events.envelope import EVENT_CLASSES
from runtrail.events.runtime_events import ModelReasoning


def values(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": "e-1",
        "run_id": "r-9",
        "tenant_id": "t-9",
        "sequence": 1,
        "type": "MODEL_REASONING",
        "schema_version": 1,
        "occurred_at": "2024-05-01T12:00:00Z",
        "actor": Actor(kind="agent", id="a"),
        "correlation_id": "c",
        "data": ModelReasoning(text="hm"),
    }
    return {**base, **changes}


def test_constructor_builds_the_concrete_class() -> None:
    event = Event(**values())
    assert type(event) is EVENT_CLASSES[("MODEL_REASONING", 1)]
    assert isinstance(event, Event)
    assert event.data == ModelReasoning(text="hm")


def test_model_validate_builds_the_concrete_class_from_the_json_form() -> None:
    form = Event(**values()).json_form()
    again = Event.model_validate(form)
    assert type(again) is EVENT_CLASSES[("MODEL_REASONING", 1)]
    assert again == validate_json_form(form)


def test_the_concrete_class_pins_type_version_and_payload() -> None:
    form = Event(**values()).json_form()
    concrete = EVENT_CLASSES[("MODEL_REASONING", 1)]
    with pytest.raises(ValidationError, match="type"):
        concrete.model_validate({**form, "type": "MODEL_REQUEST"})
    with pytest.raises(ValidationError, match="text"):
        concrete.model_validate({**form, "data": {"nope": 1}})


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"type": 3}, InvalidEvent, "'type' must be a string naming the event type, not int 3"),
        ({"type": None}, InvalidEvent, "'type' must be a string .* but it is missing"),
        ({"schema_version": "1"}, InvalidEvent, "'schemaVersion' of MODEL_REASONING must be an"),
        ({"type": "NOPE"}, UnknownEventType, "event type 'NOPE' v1: unknown type"),
        ({"schema_version": 9}, UnknownEventType, r"no version 9 \(current is 1\)"),
        ({"sequence": 0}, ValidationError, "greater than or equal to 1"),
    ],
)
def test_constructor_errors(changes: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Event(**values(**changes))


def test_model_construct_keeps_the_generic_class() -> None:
    """Tests build events of unknown types this way; no dispatch, no validation."""
    event = Event.model_construct(**values(type="NOPE"))
    assert type(event) is Event


def test_validated_instances_are_allocated_without_a_python_call() -> None:
    """pydantic-core allocates every decoded event through its class's ``__new__``: the
    concrete classes keep the C allocator, so ``Event.__new__`` (the dispatch) costs a
    consumer's hot path nothing."""
    assert "__new__" in vars(Event)
    for concrete in EVENT_CLASSES.values():
        assert concrete.__new__ is object.__new__
