"""Kafka headers of a published event.

``rt.*`` headers let consumers route, filter and dead-letter without decoding the value;
``traceparent``/``tracestate`` (W3C Trace Context) correlate the event with the agent's trace.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def event_headers(
    form: Mapping[str, Any], trace_context: Mapping[str, str] | None = None
) -> tuple[tuple[str, bytes], ...]:
    """Headers of a validated JSON-form event; an ill-formed ``traceparent`` is left out."""
    headers: list[tuple[str, bytes]] = [
        ("rt.type", str(form["type"]).encode()),
        ("rt.schema_version", str(form["schemaVersion"]).encode()),
        ("rt.tenant", str(form["tenantId"]).encode()),
        ("rt.event_id", str(form["eventId"]).encode()),
    ]
    if trace_context:
        parent = trace_context.get("traceparent")
        if parent and _TRACEPARENT.match(parent.strip().lower()):
            headers.append(("traceparent", parent.strip().lower().encode()))
            state = trace_context.get("tracestate")
            if state:
                headers.append(("tracestate", state.encode()))
        elif parent:
            log.debug("ignoring ill-formed traceparent %r", parent)
    return tuple(headers)
