"""One Kafka message as the publisher keeps it until the broker acknowledges it.

The write-ahead log (:mod:`runtrail.publisher.wal`) stores these, and a resend is byte-identical
to the first attempt. ``to_line`` / ``from_line`` are the JSON-lines form of the spool files an
older publisher left (:mod:`runtrail.publisher.spool`), which a new one imports.
"""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import orjson

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
    #: When publish() accepted it (the Kafka message timestamp; None in JSON-lines spools written before it was recorded).
    timestamp_ms: int | None = None
    #: The event's per-run sequence (so a restarted publisher knows what its spool holds).
    sequence: int | None = None

    def to_line(self) -> bytes:
        doc: dict[str, Any] = {
            "k": None if self.key is None else base64.b64encode(self.key).decode(),
            "v": base64.b64encode(self.value).decode(),
            "h": [[name, base64.b64encode(val).decode()] for name, val in self.headers],
            "id": self.event_id,
        }
        return orjson.dumps(doc) + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> SpoolRecord:
        doc = orjson.loads(line)
        key = doc["k"]
        return cls(
            key=None if key is None else base64.b64decode(key, validate=True),
            value=base64.b64decode(doc["v"], validate=True),
            headers=tuple((str(n), base64.b64decode(v, validate=True)) for n, v in doc["h"]),
            event_id=doc.get("id"),
        )


def path_component(name: str) -> str:
    """``name`` made safe as one path component (tenant IDs are arbitrary strings)."""
    safe = "".join(
        c
        if c.isascii() and (c.isalnum() or c in "-_")
        else "".join(f"%{b:02X}" for b in c.encode())
        for c in name
    )
    return safe or "_"
