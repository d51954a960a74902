"""Pairing keys and payload tests shared by every node assembler (seed 000 §1.1, §1.2)."""

from __future__ import annotations

from typing import Any


def call_key(call_id: str | None, tool_name: str | None) -> str:
    """The TOOL pairing suffix: ``callId``, falling back to ``toolName``, then ``anon``.

    An empty string counts as absent, like a missing field (ai4j tests for null only; an
    empty ID pairs nothing useful, so runtrail falls back — a documented difference).
    """
    return call_id or tool_name or "anon"


def non_empty(raw: Any) -> bool:
    """Whether a raw payload replaces the node's ``outputs`` (seed: "latest non-empty raw")."""
    if raw is None:
        return False
    if isinstance(raw, str | bytes | list | dict):
        return len(raw) > 0
    return True
