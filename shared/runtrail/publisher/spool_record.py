"""One Kafka message as the publisher keeps it until the broker acknowledges it.

The write-ahead log (:mod:`runtrail.publisher.wal`) stores these, and a resend is byte-identical
to the first attempt. The JSON-lines spool files an older publisher left are read into them by
:mod:`runtrail.publisher.legacy_spool`.
"""

from __future__ import annotations

from typing import NamedTuple

Headers = tuple[tuple[str, bytes], ...]


class SpoolRecord(NamedTuple):
    """One Kafka message, exactly as it was (or would have been) produced.

    A named tuple, not a frozen dataclass: the publisher makes one per accepted event, and a
    frozen dataclass's ``__init__`` is one ``object.__setattr__`` per field (about 1.5 µs an
    event against 0.3)."""

    key: bytes | None
    value: bytes
    headers: Headers
    event_id: str | None = None
    #: When publish() accepted it (the Kafka message timestamp; None for a record read from an older publisher's JSON-lines spool).
    timestamp_ms: int | None = None
    #: The event's per-run sequence (so a restarted publisher knows what its spool holds).
    sequence: int | None = None


def path_component(name: str) -> str:
    """``name`` made safe as one path component (tenant IDs are arbitrary strings)."""
    safe = "".join(
        c
        if c.isascii() and (c.isalnum() or c in "-_")
        else "".join(f"%{b:02X}" for b in c.encode())
        for c in name
    )
    return safe or "_"
