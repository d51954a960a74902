"""Which event fields hold which class of protected content: data, not code.

A policy names classes, not fields, so a tenant says "tool results by reference" once for
every event type and version that carries one. Envelope fields and the operational facts
(model names, call IDs, token counts, statuses) are in no class: they stay inline, because
the projection, the pairing of calls and the audit need them and they are not content.
"""

from __future__ import annotations

from enum import StrEnum


class FieldClass(StrEnum):
    PROMPTS = "prompts"
    OUTPUTS = "outputs"
    REASONING = "reasoning"
    RAW_RESPONSES = "raw_responses"
    TOOL_ARGUMENTS = "tool_arguments"
    TOOL_RESULTS = "tool_results"
    SESSION_SNAPSHOTS = "session_snapshots"


#: event type -> {data field (as on the wire) -> its class}
CONTENT_FIELDS: dict[str, dict[str, FieldClass]] = {
    "MODEL_REQUEST": {"prompt": FieldClass.PROMPTS},
    "MODEL_RESPONSE": {"message": FieldClass.OUTPUTS, "raw": FieldClass.RAW_RESPONSES},
    "MODEL_REASONING": {"text": FieldClass.REASONING},
    "TOOL_CALL": {"arguments": FieldClass.TOOL_ARGUMENTS},
    "TOOL_RESULT": {
        "output": FieldClass.TOOL_RESULTS,
        "error": FieldClass.TOOL_RESULTS,
        "trace": FieldClass.TOOL_RESULTS,
    },
    "run.input_required": {"prompt": FieldClass.PROMPTS},
    "run.input_received": {"input": FieldClass.PROMPTS},
    "session.snapshot": {
        "memory": FieldClass.SESSION_SNAPSHOTS,
        "compactResults": FieldClass.SESSION_SNAPSHOTS,
    },
}
