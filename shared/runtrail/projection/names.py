"""What a runs list finds a run by: its first and latest event times (UTC, one text form) and the sessions,
models and tools its events named, kept in the projection as bookkeeping of every applied
event (pure: read from the event alone, like ``turnId`` and ``step``).

A model is named by ``model.operation_completed`` (``modelId``) or by the ``model`` member of a
runtime MODEL_REQUEST's prompt or MODEL_RESPONSE's raw response (what OpenAI-style clients
send and answer); a tool by ``tool.invocation_requested``, TOOL_CALL or TOOL_RESULT.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from runtrail.events import Event
from runtrail.events.domain_events import ModelOperationCompleted, ToolInvocationRequested
from runtrail.events.runtime_events import ModelRequest, ModelResponse, ToolCall, ToolResult
from runtrail.instants import utc_instant
from runtrail.projection.model import RunProjection

#: Names kept per kind: a run naming more keeps its first ones (a list row stays small).
MAX_NAMES = 32
#: A name longer than this is not kept (a search term, not a payload).
MAX_NAME_CHARS = 200


def utc_text(timestamp: str) -> str:
    """``timestamp`` as UTC text of one fixed form (``2026-11-29T10:00:00.000000Z``), so text
    order is time order whatever offset or precision the writer used; kept as written when it
    does not parse."""
    moment = utc_instant(timestamp)
    if moment is None:
        return timestamp
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _model_of(value: Any) -> str | None:
    found = value.get("model") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def _named(event: Event) -> tuple[str | None, str | None]:
    """(model, tool) the event names, if any."""
    data = event.data
    if isinstance(data, ModelOperationCompleted):
        return data.model_id, None
    if isinstance(data, ModelRequest):
        return _model_of(data.prompt), None
    if isinstance(data, ModelResponse):
        return _model_of(data.raw), None
    if isinstance(data, ToolInvocationRequested | ToolCall | ToolResult):
        return None, data.tool_name
    return None, None


def _added(names: tuple[str, ...], name: str | None) -> tuple[str, ...] | None:
    """``names`` with ``name`` appended, or None when there is nothing to add."""
    if not name or len(name) > MAX_NAME_CHARS or name in names or len(names) >= MAX_NAMES:
        return None
    return (*names, name)


def name_changes(state: RunProjection, event: Event) -> dict[str, Any]:
    """The bookkeeping fields ``event`` changes in ``state``."""
    moment = utc_text(event.occurred_at)
    changes: dict[str, Any] = {"updated_at": moment}
    if state.started_at is None:
        changes["started_at"] = moment
    if (sessions := _added(state.session_ids, event.session_id)) is not None:
        changes["session_ids"] = sessions
    model, tool = _named(event)
    if (models := _added(state.model_ids, model)) is not None:
        changes["model_ids"] = models
    if (tools := _added(state.tool_names, tool)) is not None:
        changes["tool_names"] = tools
    return changes
