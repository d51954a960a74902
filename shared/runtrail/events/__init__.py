"""Event model, schemas, codec and upcasters.

Each name below is imported from its submodule on first use (:mod:`runtrail.lazy_exports`):
what needs only the errors or the JSON form (the audit chain, the start of most commands)
does not pay for the pydantic models and the codec. The model's names come from
:mod:`runtrail.events.models`, which registers every event type first, so no importer of them
sees a partial registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.events.codec import Decoded, EventCodec, validate_json_form
    from runtrail.events.errors import (
        DuplicateKeyError,
        EventError,
        InvalidEvent,
        UndecodableEvent,
        UnknownEventType,
        UnknownSchema,
    )
    from runtrail.events.jsonform import canonical_bytes, loads_strict
    from runtrail.events.models import CURRENT_VERSIONS, DATA_MODELS, Actor, Event, EventData
    from runtrail.events.runtime_events import RUNTIME_TYPES
    from runtrail.events.upcasting import upcast

__getattr__ = lazy_exports(
    __name__,
    {
        ".codec": ("Decoded", "EventCodec", "validate_json_form"),
        ".models": ("CURRENT_VERSIONS", "DATA_MODELS", "Actor", "Event", "EventData"),
        ".errors": (
            "DuplicateKeyError",
            "EventError",
            "InvalidEvent",
            "UndecodableEvent",
            "UnknownEventType",
            "UnknownSchema",
        ),
        ".jsonform": ("canonical_bytes", "loads_strict"),
        ".runtime_events": ("RUNTIME_TYPES",),
        ".upcasting": ("upcast",),
    },
)

__all__ = [
    "CURRENT_VERSIONS",
    "DATA_MODELS",
    "RUNTIME_TYPES",
    "Actor",
    "Decoded",
    "DuplicateKeyError",
    "Event",
    "EventCodec",
    "EventData",
    "EventError",
    "InvalidEvent",
    "UndecodableEvent",
    "UnknownEventType",
    "UnknownSchema",
    "canonical_bytes",
    "loads_strict",
    "upcast",
    "validate_json_form",
]
