"""Fill the envelope fields a producer may leave out, as the publisher's contract promises.

``eventId`` (a uuid4), ``occurredAt`` (UTC, milliseconds, ``Z``), ``tenantId`` (the
publisher's tenant), ``correlationId`` (the run ID) and ``actor`` (this publisher, as an
agent). ``sequence`` is left to :mod:`runtrail.publisher.sequencing`, which numbers runs.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

DEFAULT_ACTOR: dict[str, str] = {"kind": "agent", "id": "runtrail-publisher"}


#: Event IDs made ahead, from one ``os.urandom`` call per batch; ``list.pop`` is atomic, so
#: threads publishing at once never take the same one. Emptied in a forked child, whose copy
#: would otherwise hand out the parent's IDs again.
_IDS: list[str] = []
_IDS_PER_CALL = 256


def _make_ids() -> list[str]:
    """``_IDS_PER_CALL`` random (version 4) UUIDs in their canonical text form."""
    h = os.urandom(16 * _IDS_PER_CALL).hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
        f"{_VARIANT[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, len(h), 32)
    ]


#: The RFC 4122 variant: the top two bits of the variant nibble are 10, the other two random.
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def new_event_id() -> str:
    """A random (version 4) UUID in its canonical text form.

    Why a batch: one ``os.urandom`` per event was a system call, and a release of the GIL
    that let another thread in, on every event ``publish`` stamps. 122 random bits from the
    OS generator either way, as ``uuid.uuid4()`` (which also builds a UUID object per call).
    """
    try:
        return _IDS.pop()
    except IndexError:
        _IDS.extend(_make_ids())
        return _IDS.pop()


os.register_at_fork(after_in_child=_IDS.clear)


#: (the last second formatted, its text up to the seconds): one tuple, swapped whole, so a
#: thread never pairs one second with another's text.
_second: tuple[int, str] = (-1, "")


def utc_now_iso() -> str:
    """Now as ISO-8601 UTC with milliseconds and ``Z``: ``2024-05-01T12:00:00.123Z``.

    The date and time of day are formatted once a second; each call adds the milliseconds.
    """
    global _second
    sec, milli = divmod(time.time_ns() // 1_000_000, 1000)
    last, text = _second
    if last != sec:
        text = datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _second = (sec, text)
    return f"{text}.{milli:03d}Z"


def fill_defaults(form: dict[str, Any], tenant: str) -> dict[str, Any]:
    """A copy of ``form`` with missing (absent or null) envelope defaults filled in."""
    out = dict(form)
    if out.get("eventId") is None:
        out["eventId"] = new_event_id()
    if out.get("occurredAt") is None:
        out["occurredAt"] = utc_now_iso()
    if out.get("tenantId") is None:
        out["tenantId"] = tenant
    if out.get("correlationId") is None and out.get("runId") is not None:
        out["correlationId"] = out["runId"]
    if out.get("actor") is None:
        out["actor"] = dict(DEFAULT_ACTOR)
    return out
