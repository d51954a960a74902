"""Best-effort token counts from a provider's raw response (seed 000 §1.3).

Provider-agnostic and fault-tolerant: the usage block is ``raw.usage`` (or ``raw.message.usage``
in a stream's opening chunk); inputs are read from prompt_tokens / promptTokens / input /
input_tokens / inputTokens, outputs from completion_tokens / completionTokens / output /
output_tokens / outputTokens. Only a non-negative integer counts: an absent, redacted or
ill-typed value is ``None`` (unknown), never 0 and never guessed.
"""

from __future__ import annotations

from typing import Any

INPUT_KEYS: tuple[str, ...] = (
    "prompt_tokens",
    "promptTokens",
    "input",
    "input_tokens",
    "inputTokens",
)
OUTPUT_KEYS: tuple[str, ...] = (
    "completion_tokens",
    "completionTokens",
    "output",
    "output_tokens",
    "outputTokens",
)


def _usage_block(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    usage = raw.get("usage")
    if isinstance(usage, dict):
        return usage
    message = raw.get("message")
    if isinstance(message, dict) and isinstance(message.get("usage"), dict):
        nested: dict[str, Any] = message["usage"]
        return nested
    return None


def _count(block: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = block.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def raw_usage(raw: Any) -> tuple[int | None, int | None]:
    """(input tokens, output tokens) of a raw response; ``None`` where not reported."""
    block = _usage_block(raw)
    if block is None:
        return None, None
    return _count(block, INPUT_KEYS), _count(block, OUTPUT_KEYS)
