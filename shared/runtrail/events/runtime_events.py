"""Payloads of the seven runtime event types of seed 000.

An agent runtime emits these as it works; capture pairs them into node records, the resume
cache into content-addressed entries. Fields typed ``JsonValue`` hold provider- or
tool-specific objects as they were (prompts, raw responses, tool arguments and results).

The current version of each type accepts two writers' spellings, because the seed's own
runtime (ai4j-agent, ``docs/AI4J_FINDINGS.md``) publishes its payload classes as they are:

* runtrail's own: ``{prompt}``, ``{callId, toolName, arguments}``, ``{callId, toolName, output,
  error}``, ``{attempt, reason}``;
* ai4j's: an ``AgentPrompt`` (``{model, items, tools, …}``) as the whole MODEL_REQUEST data, an
  ``AgentToolCall`` (``name``, ``arguments`` as JSON text, ``type``), an ``AgentToolResult``
  (``name``, ``output`` text, ``ok``, ``error``, derived ``failed``, ``trace``) and MODEL_RETRY's
  ``{attempt, maxAttempts, reason}``.

A field that means the same thing has one name on the wire (``toolName`` also accepts
``name``; an AgentPrompt becomes ``prompt``); what only ai4j says (``maxAttempts``, ``type``,
``ok``, ``failed``, ``trace``) has its own field, in a new version with an upcaster.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field, model_validator

from runtrail.events.envelope import EventData, JsonValue

#: The fields of ai4j's ``AgentPrompt`` (fastjson2's JSON form of it).
AGENT_PROMPT_FIELDS: frozenset[str] = frozenset(
    {
        "model",
        "items",
        "systemPrompt",
        "instructions",
        "tools",
        "toolChoice",
        "parallelToolCalls",
        "temperature",
        "topP",
        "maxOutputTokens",
        "reasoning",
        "store",
        "stream",
        "user",
        "extraBody",
        "streamExecution",
    }
)


def _tool_name_field() -> Any:
    """``toolName`` on the wire; ai4j's ``name`` is accepted as its spelling (not both)."""
    return Field(
        default=None,
        validation_alias=AliasChoices("toolName", "name", "tool_name"),
        serialization_alias="toolName",
    )


class ModelRequest(EventData):
    """A model call starts; ``prompt`` is the whole prompt object (its ``model`` names the model).

    ai4j publishes its ``AgentPrompt`` as the data itself; that object *is* the prompt, so it is
    kept whole as ``prompt`` (the wire form does not change, hence no new version).
    """

    event_type = "MODEL_REQUEST"
    prompt: JsonValue

    @model_validator(mode="before")
    @classmethod
    def _agent_prompt(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data or "prompt" in data:
            return data  # runtrail's own form (and every decoded event): nothing to do
        unknown = sorted(set(data) - AGENT_PROMPT_FIELDS)
        if unknown:
            raise ValueError(
                f"neither {{prompt}} nor an ai4j AgentPrompt: unknown field(s) {unknown}"
            )
        return {"prompt": dict(data)}


class ModelResponse(EventData):
    """A (possibly partial, streamed) model response: delta text and/or the raw payload."""

    event_type = "MODEL_RESPONSE"
    message: str | None = None
    raw: JsonValue = None


class ModelReasoning(EventData):
    """A segment of the model's reasoning text, as the provider streamed it."""

    event_type = "MODEL_REASONING"
    text: str


class ModelRetryV1(EventData):
    """The runtime retries the model call of this step.

    Retained v1 (the first docstring line is in its schema): no ``maxAttempts``; upcast to v2
    with ``maxAttempts = null``, since a v1 writer never said its budget.
    """

    event_type = "MODEL_RETRY"
    version = 1
    attempt: int = Field(ge=1)
    reason: str | None = None


class ModelRetry(EventData):
    """The runtime retries the model call of this step (v2: the retry budget, as ai4j says it)."""

    event_type = "MODEL_RETRY"
    version = 2
    attempt: int = Field(ge=1)
    max_attempts: int | None = Field(default=None, ge=1)
    reason: str | None = None


class ToolCallV1(EventData):
    """A tool call is issued; ``callId`` pairs it with its result.

    Retained v1: no call ``type``; upcast to v2 with ``type = null``.
    """

    event_type = "TOOL_CALL"
    version = 1
    call_id: str | None = None
    tool_name: str | None = None
    arguments: JsonValue = None


class ToolCall(EventData):
    """A tool call is issued; ``callId`` pairs it with its result.

    v2 takes ai4j's ``AgentToolCall`` too: ``name`` for ``toolName``, ``type`` (say
    ``"function"``), and ``arguments`` as the JSON text the model produced, kept as written.
    """

    event_type = "TOOL_CALL"
    version = 2
    call_id: str | None = None
    tool_name: str | None = _tool_name_field()
    arguments: JsonValue = None
    type: str | None = None


class ToolResultV1(EventData):
    """A tool call's outcome: ``output`` on success, ``error`` on failure.

    Retained v1: upcast to v2 with ``ok``, ``failed`` and ``trace`` null.
    """

    event_type = "TOOL_RESULT"
    version = 1
    call_id: str | None = None
    tool_name: str | None = None
    output: JsonValue = None
    error: str | None = None


class ToolResult(EventData):
    """A tool call's outcome: ``output`` on success, ``error`` on failure.

    v2 takes ai4j's ``AgentToolResult`` too: ``name`` for ``toolName``, ``ok``, the derived
    ``failed`` and the tool's ``trace``. ai4j reports a failure with ``failed`` even when
    ``error`` is empty (an output starting ``TOOL_ERROR``), so ask :attr:`is_failure`, not
    ``error``.
    """

    event_type = "TOOL_RESULT"
    version = 2
    call_id: str | None = None
    tool_name: str | None = _tool_name_field()
    output: JsonValue = None
    error: str | None = None
    ok: bool | None = None
    failed: bool | None = None
    trace: JsonValue = None

    @model_validator(mode="after")
    def _consistent(self) -> ToolResult:
        # ai4j derives failed = (ok is false) or (error is not blank) or (output starts with
        # TOOL_ERROR); only a writer contradicting its own fields is refused (ok=true with an
        # error is a failure there, so it is not a contradiction)
        if self.failed is False and (self.ok is False or (self.error and self.error.strip())):
            raise ValueError("failed is false but ok is false or error is set")
        return self

    @property
    def is_failure(self) -> bool:
        """Whether the tool failed: ``failed`` if the writer said, else ``ok``/``error``."""
        if self.failed is not None:
            return self.failed
        return self.ok is False or self.error is not None


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
