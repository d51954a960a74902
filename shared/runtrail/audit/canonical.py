"""The hash formula of the audit chain, stated precisely enough for an auditor to reimplement.

Every run (one ``tenantId``, one ``runId``) has its own chain of links. Link ``i`` seals one
event and carries ``index`` (0, 1, 2, …), ``prevHash``, ``hash`` and the ``event`` itself:

    hash_i = lowercase_hex( SHA-256( ASCII(prevHash_i) || 0x7C || JCS(event_i) ) )

    prevHash_0 = "0000…0000"          (64 ASCII zeros: the genesis value)
    prevHash_i = hash_(i-1)          (for i >= 1)

In words: the bytes hashed are the 64 lowercase hexadecimal characters of the previous hash
(ASCII, which is also their UTF-8), then one vertical bar ``|`` (byte 0x7C), then the RFC 8785
canonical bytes of the event. Nothing else is hashed: no separator after the event, no trailing
newline, and neither ``index`` nor the tenant/run labels of an export line (the tenant and run
are inside the event, so they are covered anyway).

``JCS(event)`` is the JSON Canonicalization Scheme, RFC 8785, applied to the event's JSON form
**as it was written** (the writer's schema version, before any upcasting), so that history
hashes never change when our code changes. Concretely:

* the event is a JSON object in camelCase (``eventId``, ``runId``, ``tenantId``, ``sequence``,
  ``type``, ``schemaVersion``, ``occurredAt``, ``recordedAt``, ``actor``, ``causationEventId``,
  ``correlationId``, ``sessionId``, ``turnId``, ``step``, ``data``); ``sequence`` is a base-10
  *string*; optional fields that were written as ``null`` are present as ``null`` (absent and
  ``null`` are different documents and hash differently);
* object members are sorted by their names compared as arrays of UTF-16 code units, with no
  whitespace anywhere;
* strings are output as UTF-8 with only ``"``, ``\\``, and the control characters below
  U+0020 escaped (``\\b \\t \\n \\f \\r`` by name, the others as ``\\u00xx`` lowercase hex);
  everything else, including non-ASCII and ``/``, is written literally;
* numbers use the ECMAScript ``Number.prototype.toString`` form (``1`` not ``1.0``, ``1e+21``,
  ``-0`` written as ``0``); integers outside ±(2^53 - 1) are refused rather than rounded, so
  such an event cannot be sealed;
* ``true``, ``false``, ``null`` as literals.

Any RFC 8785 implementation (for Python the ``rfc8785`` package, which we use, with a faster
path in :mod:`runtrail.events.jsonform` that writes the same bytes) gives these bytes. A reader
parsing an export must refuse duplicate object keys and NaN/Infinity, since such a document
has no single canonical form.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from runtrail.audit.errors import MalformedLink
from runtrail.events.errors import InvalidEvent
from runtrail.events.jsonform import canonical_bytes

#: prevHash of the first link of every chain.
GENESIS_HASH = "0" * 64

_SEPARATOR = b"|"


class SealedEvent(Mapping[str, Any]):
    """A sealed event, read-only, parsed from the canonical bytes that were hashed only when
    something reads it.

    Why: the audit service keeps every link of a flush interval in memory, and all it needs
    of most of them is their bytes (stored, published) and three IDs (kept on the link). A
    parsed copy per event was a dict tree per link for the cyclic GC to walk until the flush;
    bytes are one untracked object. Being a read-only mapping over our own JCS output, it is
    also what the copy was for: nothing the caller does to its dict changes what was sealed.
    """

    __slots__ = ("_parsed", "canonical")

    def __init__(self, canonical: bytes) -> None:
        self.canonical = canonical
        self._parsed: dict[str, Any] | None = None

    @property
    def unread(self) -> bool:
        """Not parsed yet: nothing can have changed what it holds (once parsed, the nested
        values are plain dicts and lists, and :func:`canonical_event` reads those)."""
        return self._parsed is None

    def _dict(self) -> dict[str, Any]:
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = orjson.loads(self.canonical)
        return parsed

    def __getitem__(self, key: str) -> Any:
        return self._dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return f"SealedEvent({self._dict()!r})"


def canonical_event(event: Mapping[str, Any]) -> bytes:
    """RFC 8785 bytes of an event's JSON form; :class:`MalformedLink` if it has none."""
    if type(event) is SealedEvent and event.unread:
        return event.canonical  # never parsed, so nothing can have changed it
    try:
        return canonical_bytes(event if type(event) is dict else dict(event))
    except InvalidEvent as exc:
        raise MalformedLink(str(exc)) from exc


def hash_canonical(prev_hash: str, canonical: bytes) -> str:
    """The link hash over already-canonical event bytes."""
    digest = hashlib.sha256()
    digest.update(prev_hash.encode("utf-8", "surrogatepass"))
    digest.update(_SEPARATOR)
    digest.update(canonical)
    return digest.hexdigest()


def link_hash(prev_hash: str, event: Mapping[str, Any]) -> str:
    """``sha256(prevHash + "|" + JCS(event))`` as lowercase hex."""
    return hash_canonical(prev_hash, canonical_event(event))
