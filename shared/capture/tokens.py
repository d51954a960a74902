"""Best-effort, provider-agnostic token counts from a raw model response (seed 000 §1.3).

Providers spell the usage keys differently; absent keys give ``None``, which is never confused
with a real ``0``. Anything unexpected (non-numeric, negative, unparsable) counts as absent:
token counts are advisory, so a strange payload must not break capture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

INPUT_KEYS: tuple[str, ...] = ("prompt_tokens", "promptTokens", "input", "input_tokens")
OUTPUT_KEYS: tuple[str, ...] = ("completion_tokens", "completionTokens", "output", "output_tokens")


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value >= 0 and value.is_integer() else None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _blocks(raw: Any) -> list[Mapping[str, Any]]:
    """Where usage keys may live: the ``usage`` object first, then the payload itself."""
    if isinstance(raw, str | bytes) and raw[:1] in ("{", b"{"):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return []
    if not isinstance(raw, Mapping):
        return []
    usage = raw.get("usage")
    return [usage, raw] if isinstance(usage, Mapping) else [raw]


def _first(blocks: list[Mapping[str, Any]], keys: tuple[str, ...]) -> int | None:
    for block in blocks:
        for key in keys:
            if key in block:
                count = _count(block[key])
                if count is not None:
                    return count
    return None


def parse_usage(raw: Any) -> tuple[int | None, int | None]:
    """``(inputTokens, outputTokens)`` of a raw payload; ``None`` where no key is present."""
    blocks = _blocks(raw)
    if not blocks:
        return None, None
    return _first(blocks, INPUT_KEYS), _first(blocks, OUTPUT_KEYS)
