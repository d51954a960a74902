"""Instants written as ISO-8601 text, read one way everywhere: a ``Z`` suffix or an offset
names the zone, and a time without one is UTC (what every runtrail timestamp is), never the
reading machine's local time."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_instant(text: str) -> datetime | None:
    """The zone-aware instant ``text`` names; None when it is no ISO-8601 time."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def utc_epoch_ms(text: str) -> int | None:
    """Milliseconds since the epoch of the instant ``text`` names; None when it is no time."""
    value = utc_instant(text)
    return None if value is None else int(value.timestamp() * 1000)
