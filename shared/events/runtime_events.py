"""Payloads of the seven runtime event types of seed 000.

An agent runtime emits these as it works; capture pairs them into node records, the resume
cache into content-addressed entries. Fields typed ``JsonValue`` hold provider- or
tool-specific objects as they were (prompts, raw responses, tool arguments and results).
"""

from __future__ import annotations

from pydantic import Field

from runtrail.events.envelope import EventData, JsonValue


class ModelRequest(EventData):
    """A model call starts; ``prompt`` is the whole prompt object (its ``model`` names the model)."""

    event_type = "MODEL_REQUEST"
    prompt: JsonValue


class ModelResponse(EventData):
    """A (possibly partial, streamed) model response: delta text and/or the raw payload."""

    event_type = "MODEL_RESPONSE"
    message: str | None = None
    raw: JsonValue = None


class ModelReasoning(EventData):
    """A segment of the model's reasoning text, as the provider streamed it."""

    event_type = "MODEL_REASONING"
    text: str


class ModelRetry(EventData):
    """The runtime retries the model call of this step."""

    event_type = "MODEL_RETRY"
    attempt: int = Field(ge=1)
    reason: str | None = None


class ToolCall(EventData):
    """A tool call is issued; ``callId`` pairs it with its result."""

    event_type = "TOOL_CALL"
    call_id: str | None = None
    tool_name: str | None = None
    arguments: JsonValue = None


class ToolResult(EventData):
    """A tool call's outcome: ``output`` on success, ``error`` on failure."""

    event_type = "TOOL_RESULT"
    call_id: str | None = None
    tool_name: str | None = None
    output: JsonValue = None
    error: str | None = None


class StepEnd(EventData):
    """The model calls of a step are done."""

    event_type = "STEP_END"
    reason: str | None = None


RUNTIME_TYPES: tuple[str, ...] = (
    "MODEL_REQUEST",
    "MODEL_RESPONSE",
    "MODEL_REASONING",
    "MODEL_RETRY",
    "TOOL_CALL",
    "TOOL_RESULT",
    "STEP_END",
)
