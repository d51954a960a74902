"""Which session (and user) a trace's run belongs to, by a documented precedence.

The run is the trace; a run's events all carry one session ID, so the session is decided once,
when the run opens, from the spans of that trace at hand (the batch that opens it). The first
source that has a non-empty value wins, in this order:

1. ``gen_ai.conversation.id`` (the GenAI semconv's conversation),
2. ``session.id`` (the general semconv's session),
3. ``langfuse.session.id`` (what Langfuse-instrumented apps set),
4. the configured resource attribute (``session_resource_attribute``; none by default), for
   senders whose whole process is one session,
5. else the run ID: a run of its own.

Within one source, the first span (in mapping order) that has it wins. The user
(``user.id``, else ``enduser.id``, on a span or its resource) goes with the run's first
MODEL_REQUEST, in its prompt's ``metadata``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtrail.adapters.otel_spans import SpanView

#: span attributes naming the session, in precedence order
SESSION_ATTRIBUTES = ("gen_ai.conversation.id", "session.id", "langfuse.session.id")
#: span (or resource) attributes naming the end user, in precedence order
USER_ATTRIBUTES = ("user.id", "enduser.id")


def _first(spans: Iterable[SpanView], key: str, *, resource: bool = False) -> str | None:
    for span in spans:
        value = (span.resource if resource else span.attributes).get(key)
        if value is not None and value != "":
            return str(value)
    return None


@dataclass(frozen=True)
class Grouping:
    """The precedence above; ``session_resource_attribute`` is the configured step 4."""

    session_resource_attribute: str | None = None

    def session_of(self, spans: list[SpanView], run_id: str) -> str:
        """The session of the run ``run_id`` opened by ``spans`` (its trace's spans at hand)."""
        for key in SESSION_ATTRIBUTES:
            found = _first(spans, key)
            if found is not None:
                return found
        if self.session_resource_attribute:
            found = _first(spans, self.session_resource_attribute, resource=True)
            if found is not None:
                return found
        return run_id

    def user_of(self, spans: list[SpanView]) -> dict[str, Any]:
        """``{"user.id": …}`` (or ``enduser.id``) from a span, else its resource; else empty."""
        for resource in (False, True):
            for key in USER_ATTRIBUTES:
                found = _first(spans, key, resource=resource)
                if found is not None:
                    return {key: found}
        return {}


def by_trace(spans: Iterable[SpanView]) -> Mapping[str, list[SpanView]]:
    """The spans of each trace, in the order given."""
    out: dict[str, list[SpanView]] = {}
    for span in spans:
        out.setdefault(span.trace_id, []).append(span)
    return out
