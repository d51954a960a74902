"""ai4j's ``AgentEvent`` (the seed documents' own Java runtime) as a runtrail runtime event.

An ``AgentEvent`` carries ``type``, ``runId``, ``sessionId``, ``turnId``, ``step``, ``message``
and a ``payload`` object; fastjson2's JSON form of it is what ai4j writes and hashes. The
runtime event types runtrail knows map one to one; only *where* each value goes differs, and
nothing is invented (``docs/AI4J_FINDINGS.md`` lists what the runtime really emits):

==================  ==========================================================================
MODEL_REQUEST       ``payload`` (an ``AgentPrompt``) is the data (it becomes ``prompt``)
MODEL_RESPONSE      ``{message: message, raw: payload}`` (a delta, or the provider's raw object)
MODEL_REASONING     ``{text: message}``, or the payload when it is the text (as ai4j reads it)
MODEL_RETRY         ``payload`` (``{attempt, maxAttempts, reason}``)
TOOL_CALL           ``payload`` (an ``AgentToolCall``)
TOOL_RESULT         ``payload`` (an ``AgentToolResult``)
STEP_END            ``{reason: message}``
==================  ==========================================================================

Other ai4j types (STEP_START, FINAL_OUTPUT, ERROR, HANDOFF_*, TEAM_*, MEMORY_COMPRESS,
SANDBOX_*) are not runtrail event types: :func:`to_runtrail` refuses them by name.
"""

from __future__ import annotations

from typing import Any

from runtrail.events.errors import UnknownEventType
from runtrail.events.runtime_events import RUNTIME_TYPES

JsonDict = dict[str, Any]


def runtime_data(event_type: str, message: str | None, payload: Any) -> JsonDict:
    """The runtrail ``data`` of one ai4j event of a runtime type."""
    if event_type == "MODEL_RESPONSE":
        return {"message": message, "raw": payload}
    if event_type == "MODEL_REASONING":
        text = payload if not message and isinstance(payload, str) else message
        return {"text": text}
    if event_type == "STEP_END":
        return {"reason": message}
    if event_type in RUNTIME_TYPES:
        return dict(payload) if isinstance(payload, dict) else {}
    raise UnknownEventType(
        f"ai4j event type {event_type!r} is not a runtrail event type (known: {RUNTIME_TYPES})"
    )


def to_runtrail(agent_event: JsonDict) -> JsonDict:
    """A partial runtrail JSON form (what ``runtrail publish`` reads) of an ai4j event.

    ``schemaVersion``, ``tenantId``, ``sequence`` and the other envelope fields are left to
    the publisher's defaults; ai4j's own ``eventId`` is kept when it has one.
    """
    event_type = agent_event.get("type")
    if not isinstance(event_type, str):
        raise UnknownEventType(f"ai4j event without a string type: {agent_event!r:.200}")
    form: JsonDict = {
        "type": event_type,
        "runId": agent_event.get("runId"),
        "data": runtime_data(event_type, agent_event.get("message"), agent_event.get("payload")),
    }
    for key in ("eventId", "sessionId", "turnId", "step"):
        if agent_event.get(key) is not None:
            form[key] = agent_event[key]
    return form
