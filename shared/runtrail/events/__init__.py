"""Event model, schemas, codec and upcasters (importing this registers every event type)."""

from runtrail.events import domain_events, runtime_events  # noqa: F401  (registers payloads)
from runtrail.events.codec import Decoded, EventCodec, validate_json_form
from runtrail.events.envelope import CURRENT_VERSIONS, DATA_MODELS, Actor, Event, EventData
from runtrail.events.errors import (
    DuplicateKeyError,
    EventError,
    InvalidEvent,
    UndecodableEvent,
    UnknownEventType,
    UnknownSchema,
)
from runtrail.events.jsonform import canonical_bytes, loads_strict
from runtrail.events.runtime_events import RUNTIME_TYPES
from runtrail.events.upcasting import upcast

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
