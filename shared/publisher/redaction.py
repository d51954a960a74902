"""Redaction of secrets from an event's JSON form before it leaves the agent's process.

Agents put whatever they have into prompts and tool arguments, including HTTP headers and
credentials. The publisher runs a redactor over every event's JSON form before validation and
encoding, so a secret never reaches Kafka, a capture file or the audit chain. Only ``data`` is
redacted: envelope ids and coordinates are not secrets and must stay intact for pairing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

#: A redactor maps a JSON-form event to a (new) JSON-form event; it must not mutate its input.
Redactor = Callable[[dict[str, Any]], dict[str, Any]]

REDACTED = "[REDACTED]"

#: Key names whose values are always secret, compared lower-cased with ``-`` read as ``_``.
SENSITIVE_KEYS: frozenset[str] = frozenset(
    {
        "api_key",
        "apikey",
        "x_api_key",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "access_token",
        "refresh_token",
        "token",
        "authorization",
    }
)

_BEARER = re.compile(r"\b(Bearer)\s+[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
# OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) keys; the length floor spares words like "sk-learn".
_SK_KEY = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{16,}")
# AWS access key IDs: AKIA (long-term) or ASIA (temporary) + 16 upper-case alphanumerics.
_AWS_KEY_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")
# One cheap scan first: most strings hold none of the markers and are returned as they are.
_ANY_MARKER = re.compile(r"(?i:bearer)|sk-|AKIA|ASIA")


def is_sensitive_key(key: str) -> bool:
    """Whether values under ``key`` are secrets (case-insensitive, ``-`` same as ``_``)."""
    return key.lower().replace("-", "_") in SENSITIVE_KEYS


def redact_text(text: str) -> str:
    """``text`` with bearer tokens, ``sk-`` API keys and AWS access key IDs masked."""
    if _ANY_MARKER.search(text) is None:
        return text
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _SK_KEY.sub(REDACTED, text)
    return _AWS_KEY_ID.sub(REDACTED, text)


def redact_value(value: Any) -> Any:
    """A redacted copy of a JSON value; unchanged sub-trees are shared, never mutated."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and is_sensitive_key(k) else redact_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


# In JSON text, one pass: any marker of redact_text, or a sensitive key (the whole quoted key
# before its colon).
_SECRET_IN_JSON = re.compile(
    _ANY_MARKER.pattern
    + r'|(?i:"(?:'
    + "|".join(k.replace("_", "[_-]") for k in sorted(SENSITIVE_KEYS))
    + r')"\s*:)'
)


def _may_hold_secrets(data: Any) -> bool:
    """One scan of the payload's JSON text: False only when the walk would change nothing.

    Sound because every marker and key name is plain ASCII that JSON never escapes, so a
    string or key that the walk would redact shows up verbatim in the text.
    """
    try:
        text = orjson.dumps(data).decode()
    except TypeError:  # not plain JSON (e.g. a model object): let the walk decide
        return True
    return _SECRET_IN_JSON.search(text) is not None


def default_redactor(form: dict[str, Any]) -> dict[str, Any]:
    """Redact secrets inside ``data`` of a JSON-form event; the envelope is left alone."""
    if "data" not in form or not _may_hold_secrets(form["data"]):
        return form
    return {**form, "data": redact_value(form["data"])}


def no_redaction(form: dict[str, Any]) -> dict[str, Any]:
    """A redactor that changes nothing (for trusted, already-clean producers)."""
    return form
