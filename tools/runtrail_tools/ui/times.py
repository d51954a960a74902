"""Event times as the explorer shows them: the broker's ``recordedAt``, else ``occurredAt``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any


def event_time(event: Mapping[str, Any]) -> datetime | None:
    """When the event was recorded (log-append time), else when it occurred; None if neither
    parses (a timestamp is the writer's text, kept as written)."""
    for name in ("recordedAt", "occurredAt"):
        value = event.get(name)
        if isinstance(value, str) and value:
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
    return None


def short(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def seconds(first: datetime | None, last: datetime | None) -> float | None:
    if first is None or last is None:
        return None
    return max(0.0, (last - first).total_seconds())


def duration_text(value: float | None) -> str:
    if value is None:
        return ""
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def clock_text(iso: str) -> str:
    """Time of day to the millisecond (``10:00:01.234``) of an ISO timestamp, or the text as
    written when it does not parse."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def ms_text(value: int) -> str:
    """A duration in milliseconds, as a person reads it (``840 ms``, ``2.31 s``, ``4m05s``)."""
    if value < 1000:
        return f"{value} ms"
    if value < 60_000:
        return f"{value / 1000:.2f} s"
    return duration_text(value / 1000)
