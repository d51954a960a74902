"""Why an event could not be read: each reason becomes a dead-letter header value."""

from __future__ import annotations


class EventError(Exception):
    """Base of every reason an input cannot become a valid current event."""

    reason: str = "invalid-event"


class UndecodableEvent(EventError):
    """The bytes are not an event encoding we know (no marker, truncated, corrupt body)."""

    reason = "undecodable"


class UnknownSchema(EventError):
    """The writer schema's fingerprint (or registry ID) is not among the retained schemas."""

    reason = "unknown-schema"


class UnknownEventType(EventError):
    """The event type, or this version of it, is not known to this code."""

    reason = "unknown-event-type"


class InvalidEvent(EventError):
    """The event decodes but its envelope or payload fails validation."""

    reason = "invalid-payload"


class DuplicateKeyError(EventError, ValueError):
    """A JSON object repeats a key; we reject rather than keep the last silently."""

    reason = "duplicate-json-key"
