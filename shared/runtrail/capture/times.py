"""Event time as epoch milliseconds.

Record times come from the events' ``occurredAt``, never from the wall clock, so that
reprocessing the same events yields byte-identical records.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(iso: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 timestamp (naive means UTC)."""
    parsed = datetime.fromisoformat(iso)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - _EPOCH) // _MS


def epoch_ms_or_none(iso: str | None) -> int | None:
    """:func:`epoch_ms` of a timestamp as a reader finds it (absent, ``Z``-suffixed, or not a
    timestamp at all: None, for a display that shows no time rather than failing)."""
    if not iso:
        return None
    try:
        return epoch_ms(iso.replace("Z", "+00:00"))
    except ValueError:
        return None


_DAY_MS = 86_400_000


def utc_date(ms: int) -> str:
    """The UTC calendar date (``yyyy-mm-dd``) of an epoch-millisecond instant."""
    return _utc_day(ms // _DAY_MS)


@lru_cache(maxsize=1024)  # once per day, not per record
def _utc_day(day: int) -> str:
    return (_EPOCH + day * _DAY_MS * _MS).strftime("%Y-%m-%d")
