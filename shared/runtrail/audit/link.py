"""Links, run heads, and their JSON form (one export line per link).

A :class:`Link` holds the event exactly as it was sealed; the tenant, run and eventId it belongs
to are read from the event itself, so a link cannot claim one run while sealing another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtrail.audit.canonical import GENESIS_HASH, SealedEvent, canonical_event, hash_canonical
from runtrail.audit.errors import MalformedLink
from runtrail.camel_json import camel_fields

#: Keys of one export line, in the order a human reads them (the file itself is JCS-sorted).
LINE_KEYS = ("tenantId", "runId", "index", "prevHash", "hash", "event")


def _text_field(event: Mapping[str, Any], name: str) -> str:
    value = event.get(name)
    # ``not value or value.isspace()`` is ``not value.strip()`` without copying the string
    if not isinstance(value, str) or not value or value.isspace():
        raise MalformedLink(f"event has no {name}")
    return value


def event_sequence(event: Mapping[str, Any]) -> int | None:
    """The publisher's ``sequence`` (a base-10 string in the JSON form), if it has one."""
    value = event.get("sequence")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


@dataclass(frozen=True, slots=True)
class Link:
    """One sealed event: ``hash = sha256(prevHash + "|" + JCS(event))``.

    ``sealed_bytes`` and ``ids`` are set only by :func:`seal`: the JCS bytes it hashed (so
    that storing and publishing the link need not canonicalise the event again) and the
    (tenantId, runId, eventId) it checked (read many times per link on the way to the store
    and the topic). They are caches, not part of the link: equality ignores them and
    verification never reads them (it recomputes from ``event``). ``self_hashed`` says that
    :func:`seal` computed ``hash`` from ``sealed_bytes`` in this process, so a store need not
    hash the link again; it is not an init field, so ``dataclasses.replace`` (how tests and
    tools tamper with links) always yields a link that is hashed again.
    """

    index: int
    event: Mapping[str, Any]
    prev_hash: str
    hash: str
    sealed_bytes: bytes | None = field(default=None, compare=False, repr=False)
    ids: tuple[str, str, str] | None = field(default=None, compare=False, repr=False)
    self_hashed: bool = field(default=False, init=False, compare=False, repr=False)

    def canonical(self) -> bytes:
        """JCS bytes of the event (those :func:`seal` hashed, when it made this link)."""
        return self.sealed_bytes if self.sealed_bytes is not None else canonical_event(self.event)

    @property
    def tenant_id(self) -> str:
        ids = self.ids
        return ids[0] if ids is not None else _text_field(self.event, "tenantId")

    @property
    def run_id(self) -> str:
        ids = self.ids
        return ids[1] if ids is not None else _text_field(self.event, "runId")

    @property
    def event_id(self) -> str:
        ids = self.ids
        return ids[2] if ids is not None else _text_field(self.event, "eventId")

    def to_json(self) -> dict[str, Any]:
        """The export-line object: the link plus the tenant and run it belongs to."""
        return {
            "tenantId": self.tenant_id,
            "runId": self.run_id,
            "index": self.index,
            "prevHash": self.prev_hash,
            "hash": self.hash,
            "event": dict(self.event),
        }


@dataclass(frozen=True, slots=True)
class LinkSummary:
    """A stored link's envelope fields only, read without parsing its event in Python: what a
    long run's timeline lists (its data is read one link at a time, on demand). Display only:
    verification always reads whole links."""

    index: int
    event_id: str | None
    event_type: str | None
    sequence: int | None
    step: int | None
    turn_id: str | None
    session_id: str | None
    occurred_at: str | None
    recorded_at: str | None
    #: who wrote the event (``actor.kind``/``actor.id``): an approval's actor is its approver
    actor_kind: str | None = None
    actor_id: str | None = None


@dataclass(frozen=True, slots=True)
class RunHead:
    """Where a run's chain ends: its length and the hash of its last link."""

    tenant_id: str
    run_id: str
    length: int
    hash: str

    def to_json(self) -> dict[str, Any]:
        return camel_fields(self)

    @classmethod
    def from_json(cls, obj: Any) -> RunHead:
        if not isinstance(obj, dict) or set(obj) != {"tenantId", "runId", "length", "hash"}:
            raise MalformedLink("a run head is {tenantId, runId, length, hash}")
        tenant, run, length, hash_ = obj["tenantId"], obj["runId"], obj["length"], obj["hash"]
        if not (isinstance(tenant, str) and isinstance(run, str) and isinstance(hash_, str)):
            raise MalformedLink("run head fields have the wrong types")
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise MalformedLink("run head length must be a non-negative integer")
        return cls(tenant, run, length, hash_)


def seal(
    index: int,
    prev_hash: str,
    event: Mapping[str, Any],
    ids: tuple[str, str, str] | None = None,
) -> Link:
    """A new link for ``event`` after a link whose hash is ``prev_hash``.

    The sealed event is a :class:`SealedEvent` over its canonical bytes, so a caller that
    mutates its own dict afterwards cannot change what was sealed. (Those bytes are our own
    JCS output, so they hold no duplicate key or NaN for a strict parser to refuse.)
    ``ids`` is the event's (tenantId, runId, eventId) when the caller checked them already.
    """
    if ids is None:
        ids = (
            _text_field(event, "tenantId"),
            _text_field(event, "runId"),
            _text_field(event, "eventId"),
        )
    return seal_canonical(index, prev_hash, canonical_event(event), ids)


def seal_canonical(index: int, prev_hash: str, canonical: bytes, ids: tuple[str, str, str]) -> Link:
    """:func:`seal` of an event given as its RFC 8785 bytes (the caller's own, such as
    ``EventCodec.written_canonical`` wrote them) and its checked (tenantId, runId, eventId)."""
    link = Link(
        index,
        SealedEvent(canonical),
        prev_hash,
        hash_canonical(prev_hash, canonical),
        canonical,
        ids,
    )
    object.__setattr__(link, "self_hashed", True)  # frozen: only sealing sets it
    return link


def genesis_head(tenant_id: str, run_id: str) -> RunHead:
    """The head of a run with no links yet."""
    return RunHead(tenant_id, run_id, 0, GENESIS_HASH)


def link_from_json(obj: Any) -> tuple[Link, str, str]:
    """A link and the (tenantId, runId) its export line claims; :class:`MalformedLink` if not."""
    if not isinstance(obj, dict):
        raise MalformedLink("an export line must be a JSON object")
    keys = set(obj)
    if keys != set(LINE_KEYS):
        missing = sorted(set(LINE_KEYS) - keys)
        extra = sorted(keys - set(LINE_KEYS))
        raise MalformedLink(f"export line keys: missing {missing}, unexpected {extra}")
    index, prev_hash, hash_, event = obj["index"], obj["prevHash"], obj["hash"], obj["event"]
    tenant, run = obj["tenantId"], obj["runId"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise MalformedLink("index must be a non-negative integer")
    if not isinstance(prev_hash, str) or not isinstance(hash_, str):
        raise MalformedLink("prevHash and hash must be strings")
    if not isinstance(event, dict):
        raise MalformedLink("event must be a JSON object")
    if not isinstance(tenant, str) or not isinstance(run, str):
        raise MalformedLink("tenantId and runId must be strings")
    return Link(index, event, prev_hash, hash_), tenant, run
