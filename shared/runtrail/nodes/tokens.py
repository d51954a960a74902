"""The one token parser: capture records and run projections read usage the same way.

It follows ai4j's ``IoCaptureAgentListener.extractUsage`` (fastjson2 semantics, checked by
running it), because seed 000 §1.3 describes that code:

* the usage block is the raw payload's ``usage`` object only — not ``message.usage``, not
  top-level keys; a ``usage`` given as JSON text is parsed, a raw payload given as JSON text
  is not (fastjson2 cannot read a JSON string as an object either);
* inputs: ``prompt_tokens``, ``promptTokens``, ``input``, ``input_tokens`` (no
  ``inputTokens``); outputs: ``completion_tokens``, ``completionTokens``, ``output``,
  ``output_tokens``; the first key whose value is not null wins;
* a number counts truncated (``12.0`` and ``12.7`` are 12), a numeric string too (``"12"``);
  ``""`` and ``"null"`` are null (the next key is tried); a negative count is absent;
* a value that cannot be a count (``true``, ``"abc"``, a list, the redaction marker) makes its
  slot absent. fastjson2 throws there and ai4j loses both slots; runtrail keeps the other one,
  because a redacted count must not erase a readable one (a documented difference).

``None`` means absent, never 0. A node keeps the last value seen per slot (:func:`keep_last`):
a later raw without usage does not erase counts that arrived mid-stream.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from runtrail.whole_numbers import MAX_INT64

INPUT_KEYS: tuple[str, ...] = ("prompt_tokens", "promptTokens", "input", "input_tokens")
OUTPUT_KEYS: tuple[str, ...] = ("completion_tokens", "completionTokens", "output", "output_tokens")

Usage = tuple[int | None, int | None]

_INTEGER = re.compile(r"[+-]?[0-9]+")


class _NotACount(ValueError):
    """A usage value fastjson2's ``getLong`` rejects with an exception."""


def _long(value: Any) -> int | None:
    """fastjson2 ``JSONObject.getLong``: None for null, a long, or :class:`_NotACount`."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _NotACount(value)
    if isinstance(value, int):
        return max(-MAX_INT64 - 1, min(MAX_INT64, value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotACount(value)
        return max(-MAX_INT64 - 1, min(MAX_INT64, int(value)))
    if isinstance(value, str):
        if not value or value.lower() == "null":
            return None
        if "." in value:
            try:
                return _long(float(value))
            except ValueError:
                raise _NotACount(value) from None
        if _INTEGER.fullmatch(value):
            return _long(int(value))
    raise _NotACount(value)


def _first(block: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        try:
            count = _long(block.get(key))
        except _NotACount:
            return None
        if count is not None:
            return count if count >= 0 else None
    return None


def parse_usage(raw: Any) -> Usage:
    """``(inputTokens, outputTokens)`` of one raw payload; ``None`` where absent."""
    if not isinstance(raw, dict):
        return None, None
    usage = raw.get("usage")
    if isinstance(usage, str):
        try:
            usage = orjson.loads(usage)
        except orjson.JSONDecodeError:
            return None, None
    if not isinstance(usage, dict):
        return None, None
    return _first(usage, INPUT_KEYS), _first(usage, OUTPUT_KEYS)


def keep_last(previous: Usage, seen: Usage) -> Usage:
    """Per slot, the newly seen count if there is one, else the previous one."""
    return (
        previous[0] if seen[0] is None else seen[0],
        previous[1] if seen[1] is None else seen[1],
    )
