"""Redaction of secrets from an event's JSON form before it leaves the agent's process.

Why here: the history is append-only (the audit store forbids DELETE), so a secret that reaches
Kafka can never be purged from the topic, capture files, audit chain, sessions or caches. The
publisher runs :func:`default_redactor` over every event's JSON form before validation and
encoding. What it masks (``docs/SECURITY.md`` has the full list and the reasons):

* values under secret-bearing key names, anywhere in ``data`` (:func:`is_sensitive_key`);
* secret-shaped text inside any string: provider keys and tokens, JWTs, PEM private keys,
  ``Bearer``/``Basic`` credentials, DSN passwords, ``key=value`` / ``"key": "value"`` pairs of a
  secret key name, and JSON text inside strings (parsed and walked like ``data``);
* the envelope's free-text fields (``correlationId``, ``actor.id``) the same way. Identifier
  fields (run, tenant, event, session, turn, causation ids) are keys consumers group and pair
  on: masking them would merge unrelated runs, so an identifier holding a secret-shaped value
  is refused (:class:`SecretInIdentifier`) instead.

Cost: one scan of the event's JSON text (:mod:`.secret_markers`) decides whether anything
could match; a clean event (the common case) is returned as it is, without a walk. Key names
are judged in :mod:`.secret_keys`, text patterns live in :mod:`.secret_text`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from runtrail.publisher.secret_keys import is_sensitive_key
from runtrail.publisher.secret_markers import has_marker
from runtrail.publisher.secret_text import REDACTED, mask_text

#: A redactor maps a JSON-form event to a (new) JSON-form event; it must not mutate its input.
Redactor = Callable[[dict[str, Any]], dict[str, Any]]


class SecretInIdentifier(ValueError):
    """An envelope identifier holds a secret-shaped value; the event is refused, not masked."""


def _json_text(text: str) -> str | None:
    """``text`` redacted as JSON when it is a JSON object or array, else None."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    redacted = redact_value(parsed)
    return text if redacted == parsed else orjson.dumps(redacted).decode()


def redact_text(text: str) -> str:
    """``text`` with every secret shape listed in the module docstring masked."""
    if not has_marker(text):
        return text
    as_json = _json_text(text)
    return as_json if as_json is not None else mask_text(text)


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


#: Envelope fields consumers key on: never masked; a secret-shaped value refuses the event.
IDENTIFIER_FIELDS: tuple[str, ...] = (
    "eventId",
    "runId",
    "tenantId",
    "causationEventId",
    "sessionId",
    "turnId",
)
#: Envelope free text (no consumer keys on it): masked like strings in ``data``.
FREE_TEXT_FIELDS: tuple[str, ...] = ("correlationId",)


def json_text(form: dict[str, Any]) -> bytes | None:
    """The event's orjson text, or None when it is not plain JSON (e.g. a model object, a
    value nested past orjson's limit): the text the prefilter scans."""
    try:
        return orjson.dumps(form)
    except (TypeError, orjson.JSONEncodeError):
        return None


def _may_hold_secrets(text: bytes | None) -> bool:
    """One scan of the event's JSON text: False only when the walk would change nothing.

    Sound because every marker is plain ASCII that JSON never escapes, so a string or key
    that the walk would redact shows it verbatim in the text. No text: the walk decides.
    """
    return text is None or has_marker(text)


def _redact_envelope(form: dict[str, Any]) -> dict[str, Any]:
    for name in IDENTIFIER_FIELDS:
        value = form.get(name)
        if isinstance(value, str) and redact_text(value) != value:
            raise SecretInIdentifier(
                f"envelope field {name} holds a secret-shaped value; identifiers are never "
                "masked (consumers key on them), so the event is refused"
            )
    out = form
    for name in FREE_TEXT_FIELDS:
        value = form.get(name)
        if isinstance(value, str) and (masked := redact_text(value)) != value:
            out = {**out, name: masked}
    actor = form.get("actor")
    if isinstance(actor, dict) and isinstance(actor.get("id"), str):
        masked = redact_text(actor["id"])
        if masked != actor["id"]:
            out = {**out, "actor": {**actor, "id": masked}}
    return out


def default_redactor(form: dict[str, Any]) -> dict[str, Any]:
    """Redact secrets in ``data`` and the envelope's free text; refuse secret identifiers."""
    return redact_scanned(form, json_text(form))


def redact_scanned(form: dict[str, Any], text: bytes | None) -> dict[str, Any]:
    """:func:`default_redactor` of ``form`` whose :func:`json_text` is ``text`` (made once by
    a caller that needs it too, the publisher's limits check)."""
    if not _may_hold_secrets(text):
        return form
    out = _redact_envelope(form)
    if "data" in out:
        out = {**out, "data": redact_value(out["data"])}
    return out


__all__ = [
    "REDACTED",
    "Redactor",
    "SecretInIdentifier",
    "default_redactor",
    "is_sensitive_key",
    "json_text",
    "no_redaction",
    "redact_scanned",
    "redact_text",
    "redact_value",
]


def no_redaction(form: dict[str, Any]) -> dict[str, Any]:
    """A redactor that changes nothing (for trusted, already-clean producers)."""
    return form
