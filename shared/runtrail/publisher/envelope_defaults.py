"""Fill the envelope fields a producer may leave out, as the publisher's contract promises.

``eventId`` (a uuid4), ``occurredAt`` (UTC, milliseconds, ``Z``), ``tenantId`` (the
publisher's tenant), ``correlationId`` (the run ID) and ``actor`` (this publisher, as an
agent). ``sequence`` is left to :mod:`runtrail.publisher.sequencing`, which numbers runs.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

DEFAULT_ACTOR: dict[str, str] = {"kind": "agent", "id": "runtrail-publisher"}


def new_event_id() -> str:
    return str(uuid.uuid4())


def utc_now_iso() -> str:
    """Now as ISO-8601 UTC with milliseconds and ``Z``: ``2024-05-01T12:00:00.123Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
