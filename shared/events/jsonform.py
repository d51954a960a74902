"""The JSON form of events: strict parsing and RFC 8785 canonical bytes.

Parsing rejects duplicate object keys (a JSON document that says two things is not evidence)
and the non-standard NaN/Infinity literals. Canonical bytes are RFC 8785 (JCS) via ``rfc8785``,
the form the audit chain hashes.
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

from runtrail.events.errors import DuplicateKeyError, InvalidEvent


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKeyError(f"duplicate key {key!r} in a JSON object")
        obj[key] = value
    return obj


def _no_constants(name: str) -> Any:
    raise InvalidEvent(f"non-standard JSON literal {name}")


def loads_strict(text: str | bytes) -> Any:
    """Parse JSON, refusing duplicate keys and NaN/Infinity."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def canonical_bytes(obj: Any) -> bytes:
    """RFC 8785 (JCS) canonical UTF-8 bytes of a JSON value."""
    try:
        return bytes(rfc8785.dumps(obj))
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise InvalidEvent(f"cannot canonicalize: {exc}") from exc
