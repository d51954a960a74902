"""The part of :class:`~runtrail.publisher.Publisher` the callback adapters publish through.

A protocol, so an adapter's tests (and a user's) can hand it any sink, and the adapters that
run off the agent's thread (the OpenAI Agents processor, the LiteLLM logger) type it alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class EventSink(Protocol):
    """``publish`` (the event's ID, or None when refused) and ``flush``."""

    def publish(
        self,
        event_type: str,
        run_id: str,
        data: Mapping[str, Any],
        *,
        session_id: str | None = ...,
        turn_id: str | None = ...,
        step: int | None = ...,
        actor: Mapping[str, str] | None = ...,
        tenant_id: str | None = ...,
    ) -> str | None: ...

    def flush(self, timeout: float = ...) -> int: ...
