"""The JSON form of events: strict parsing and RFC 8785 canonical bytes.

Parsing rejects duplicate object keys (a JSON document that says two things is not evidence)
and the non-standard NaN/Infinity literals. Canonical bytes are RFC 8785 (JCS) via ``rfc8785``,
the form the audit chain hashes.

Fast path. The reference implementation is pure Python and costs about as much as decoding an
event; for values where orjson's sorted output is byte-for-byte the RFC 8785 form, orjson is
used:

* strings: orjson escapes exactly what JCS escapes (``"``, ``\\``, U+0000-U+001F with the short
  forms \\b \\t \\n \\f \\r), nothing else;
* object keys: orjson sorts by UTF-8 bytes, JCS by UTF-16 code units — the same order unless a
  key holds a character beyond U+FFFF, which falls back;
* numbers: integers within ±2^53, and non-integral doubles of magnitude ≥ 1e-4 (both print the
  shortest round-trip digits in fixed notation there); integral doubles (JCS ``1``, orjson
  ``1.0``), tiny ones and anything else fall back.

Everything else goes to the reference implementation, so the result is always RFC 8785; a
property test (tests/test_canonical_fast_path.py) holds the two to the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson
import rfc8785

from runtrail.events import native
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


def canonical_bytes_reference(obj: Any) -> bytes:
    """RFC 8785 (JCS) canonical UTF-8 bytes of a JSON value, by the reference library."""
    try:
        return bytes(rfc8785.dumps(obj))
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise InvalidEvent(f"cannot canonicalize: {exc}") from exc


_MAX_SAFE = 2**53
_BMP = "\uffff"


def _fast_float(value: float) -> bool:
    return math.isfinite(value) and not value.is_integer() and abs(value) >= 1e-4


def _fast_ok(value: Any) -> bool:
    """Whether orjson's sorted output of ``value`` is its RFC 8785 form (see the module doc).

    Iterative, and the scalars inside a container are checked in place: most of an event is
    strings and small ints, and a Python call per scalar was most of the audit service's
    canonicalisation time."""
    # the containers left to walk: the value itself is held in a one-element tuple
    stack: list[Any] = [(value,)]
    pop, push = stack.pop, stack.append
    low, high = -_MAX_SAFE, _MAX_SAFE
    while stack:
        item = pop()
        if type(item) is dict:
            for key in item:
                if type(key) is not str or not (key.isascii() or max(key) <= _BMP):
                    return False
            item = item.values()
        for child in item:
            kind = type(child)
            if kind is str or child is None or kind is bool:
                continue
            if kind is int:
                if not low < child < high:
                    return False
                continue
            if kind is dict or kind is list:
                push(child)
                continue
            if kind is not float or not _fast_float(child):
                return False
    return True


#: the same check, compiled (None without runtrail_native; it answers None when unsure)
_native_fast_ok: Callable[[Any], bool | None] | None = getattr(native.NATIVE, "jcs_fast_ok", None)


def tight(data: bytes) -> bytes:
    """``data`` copied to its length, for bytes from ``orjson.dumps`` that are kept.

    orjson's bytes hold its whole write buffer for as long as they live (8 KB for a 600-byte
    event). Kept by the thousand (a session's every event, a flush interval's audit links,
    capture lines waiting for their write), that was most of a service's memory: the sessions
    service held 11 KB an event, 2 with copies. A copy costs about a tenth of a microsecond."""
    return bytes(memoryview(data))


def canonical_bytes(obj: Any) -> bytes:
    """RFC 8785 (JCS) canonical UTF-8 bytes of a JSON value (orjson where provably identical),
    :func:`tight` (they are often kept)."""
    ok = None if _native_fast_ok is None else _native_fast_ok(obj)
    if ok is None:
        ok = _fast_ok(obj)
    if ok:
        try:
            return tight(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
        except (orjson.JSONEncodeError, TypeError):
            pass  # e.g. a lone surrogate: let the reference implementation decide
    return canonical_bytes_reference(obj)
