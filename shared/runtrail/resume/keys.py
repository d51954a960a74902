"""Content keys of the resume cache (seed 000 §3.1), hashed so every store and topic can hold them.

* MODEL: the whole prompt, canonicalised with RFC 8785, so two prompts that differ in any field
  (temperature, the order of the tools list…) get different keys — precise but sensitive, the
  documented cost of content addressing (seed 000 §6).
* TOOL: ``toolName|canonical(arguments)``: key order inside the arguments does not matter, their
  values do.

Both are sha256, lowercase hex. The idempotency key of a tool call is derived from the run ID and
the call ID only, so a call re-executed after a crash carries the key its first attempt carried.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any

from runtrail.nodes.keys import call_key
from runtrail.resume.canonical import canonical_json


class Kind(StrEnum):
    """The two node types the cache keeps results for."""

    MODEL = "model"
    TOOL = "tool"


class Scope(StrEnum):
    """Which earlier results a lookup may be answered with.

    ``RUN`` (the default): only results recorded by the run being resumed (the cache's run ID),
    so one run's non-deterministic answers are never served to an unrelated run. ``TENANT``:
    any run of the tenant — the seed's "same input, any session → hit".
    """

    RUN = "run"
    TENANT = "tenant"


def model_key(prompt: Any) -> str:
    """sha256 of the RFC 8785 form of the whole prompt."""
    return hashlib.sha256(canonical_json(prompt)).hexdigest()


def tool_key(tool_name: str, arguments: Any) -> str:
    """sha256 of ``toolName|canonical(arguments)``."""
    digest = hashlib.sha256(tool_name.encode("utf-8"))
    digest.update(b"|")
    digest.update(canonical_json(arguments))
    return digest.hexdigest()


def idempotency_key(run_id: str, call_id: str) -> str:
    """The key a tool receives to make its side effect idempotent: stable across re-runs."""
    digest = hashlib.sha256(b"runtrail-idempotency\x00")
    digest.update(run_id.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(call_id.encode("utf-8"))
    return "rt-" + digest.hexdigest()[:40]


def intent_id(
    turn_id: str | None, step: int | None, call_id: str | None, tool_name: str | None
) -> str:
    """Identifies one tool call within its run: ``turnId|step|callKey``."""
    return f"{turn_id or ''}|{'' if step is None else step}|{call_key(call_id, tool_name)}"
