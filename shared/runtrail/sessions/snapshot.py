"""The session snapshot: memory, event log and compact results, sealed by a content digest.

Seed 000 §4 names the content (memory + event log + compact results); seed 002 says what makes
a snapshot safe to build on: it is a cache, so it carries the last applied sequence and the
version of the code that built it, and it is verified before use. Here:

* ``lastAppliedSequence`` maps each run of the session to the highest sequence applied — one
  number per run, because the envelope's ``sequence`` is counted per run and a session may
  span several runs (on different partitions);
* ``codeVersion`` is :data:`CODE_VERSION`; a session refuses to restore from another;
* ``digest`` is ``sha256:<hex>`` of the RFC 8785 canonical bytes of every other field, so any
  change to any byte of content is caught on load.

The stored form *is* the canonical form (digest included), so the digest can be checked
against exactly what was written. Canonicalising a long event log is the expensive part, so
each event's canonical bytes are computed once (when the event is applied, or when a snapshot
is read) and carried along: RFC 8785 canonicalises array elements independently, which makes
the log's canonical form the bracketed, comma-joined canonical forms of its events. A snapshot
sealed from those bytes alone (what a session saves) holds its log as an
:class:`~runtrail.sessions.event_log.EventLog`: the forms are parsed only if someone reads them.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Annotated, Any

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_serializer,
)
from pydantic.alias_generators import to_camel

from runtrail.events import EventError, canonical_bytes
from runtrail.sessions.errors import CorruptSnapshot, UntrustedSnapshot
from runtrail.sessions.event_log import EventLog, JsonForm
from runtrail.sessions.log_digest import LogDigest

#: Layout of the stored document; a reader refuses layouts it does not know.
SNAPSHOT_FORMAT = 1
#: Version of the code that derives a session from its events (ordering, memory rule). A
#: snapshot from another version is not trusted: rebuild from the topic instead.
CODE_VERSION = "runtrail.sessions/1"
DIGEST_PREFIX = "sha256:"

NonBlank = Annotated[str, StringConstraints(min_length=1)]


class _Camel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


class MemorySource(_Camel):
    """Which ``session.snapshot`` event the memory and compact results were taken from."""

    run_id: NonBlank
    sequence: Annotated[int, Field(ge=1)]
    snapshot_ref: str | None = None
    digest: str | None = None


class AgentSessionSnapshot(_Camel):
    """One session's snapshot. Build with :func:`seal`; read with :func:`parse_snapshot`."""

    format: int = SNAPSHOT_FORMAT
    tenant_id: NonBlank
    session_id: NonBlank
    code_version: NonBlank
    last_applied_sequence: dict[str, Annotated[int, Field(ge=1)]]
    memory: Any = None
    compact_results: Any = None
    memory_from: MemorySource | None = None
    #: the events in session order: a list when read from a document, an :class:`EventLog`
    #: (parsed from the events' canonical bytes on first read) when sealed from those bytes
    event_log: Sequence[JsonForm] = Field(default_factory=list)
    #: Per topic and partition (as text), the offset after the last event applied from it:
    #: where a restore starts reading the tail.
    next_offsets: dict[str, dict[str, Annotated[int, Field(ge=0)]]] = Field(default_factory=dict)
    digest: NonBlank

    _event_bytes: list[bytes] | None = PrivateAttr(default=None)
    _stored: bytes | None = PrivateAttr(default=None)

    @field_serializer("event_log")
    def _log_as_list(self, log: Sequence[JsonForm]) -> list[JsonForm]:
        return list(log)

    @property
    def revision(self) -> int:
        """How many events the snapshot holds: it only grows, so it orders snapshots."""
        return len(self.event_log)

    def event_bytes(self) -> list[bytes]:
        """The canonical bytes of each event of the log (computed once)."""
        if self._event_bytes is None:
            log = self.event_log
            if isinstance(log, EventLog):
                self._event_bytes = log.canonical
            else:
                self._event_bytes = [canonical_bytes(e) for e in log]
        return self._event_bytes

    def content_bytes(self) -> bytes:
        """Canonical bytes of everything but the digest: what the digest is taken over."""
        return _canonical(self, self.event_bytes(), with_digest=False)

    def to_bytes(self) -> bytes:
        """The stored form: the canonical bytes of the whole snapshot, digest included."""
        if self._stored is None:
            self._stored = _canonical(self, self.event_bytes(), with_digest=True)
        return self._stored


def digest_of(content: bytes) -> str:
    return DIGEST_PREFIX + hashlib.sha256(content).hexdigest()


def seal(
    *,
    tenant_id: str,
    session_id: str,
    last_applied_sequence: Mapping[str, int],
    event_log: Sequence[JsonForm] | None = None,
    event_bytes: Sequence[bytes] | None = None,
    memory: Any = None,
    compact_results: Any = None,
    memory_from: MemorySource | None = None,
    next_offsets: Mapping[str, Mapping[str, int]] | None = None,
    code_version: str = CODE_VERSION,
    log_digest: LogDigest | None = None,
) -> AgentSessionSnapshot:
    """A snapshot of the given content, with its digest computed.

    The log is given as its events' JSON forms (``event_bytes``, their canonical bytes, if
    the caller has them), or as the canonical bytes alone: the snapshot then reads its forms
    from those bytes if asked (:class:`EventLog`). ``log_digest``: the digest state of the
    previous snapshot of this session (a session's own), so that only what its log gained
    since is hashed."""
    log: Sequence[JsonForm]
    if event_log is None:
        if event_bytes is None:
            raise ValueError("seal needs the event log or its events' canonical bytes")
        log = EventLog(list(event_bytes))
        events = log.canonical
        # canonical bytes are JSON; of their items only the type is left to check
        objects = all(map(bytes.startswith, events, repeat(b"{")))
    else:
        log = list(event_log)
        if event_bytes is not None:
            events = list(event_bytes)
            if len(events) != len(log):
                raise ValueError("event_bytes must hold one entry per event of the log")
        else:
            try:
                events = [canonical_bytes(event) for event in log]
            except EventError as exc:
                raise ValueError(
                    f"session {tenant_id}/{session_id}: content is not JSON: {exc}"
                ) from exc
        objects = all(type(event) is dict for event in log)
    if not objects:
        raise ValueError(f"session {tenant_id}/{session_id}: an event of the log is not an object")
    fields: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "tenantId": tenant_id,
        "sessionId": session_id,
        "codeVersion": code_version,
        "lastAppliedSequence": dict(last_applied_sequence),
        "memory": memory,
        "compactResults": compact_results,
        "memoryFrom": memory_from.model_dump(mode="json", by_alias=True) if memory_from else None,
        "nextOffsets": {t: dict(p) for t, p in (next_offsets or {}).items()},
    }
    try:
        members = _members(fields, events)
    except EventError as exc:
        raise ValueError(f"session {tenant_id}/{session_id}: content is not JSON: {exc}") from exc
    # The log is left out of the validation: canonicalising it has checked that it is JSON
    # and its items' type is checked above (validating it made every save O(log)).
    digest = _digest(members, events, log_digest)
    checked = AgentSessionSnapshot.model_validate({**fields, "eventLog": [], "digest": digest})
    snapshot = checked.model_copy(update={"event_log": log})
    snapshot._event_bytes = events
    snapshot._stored = _with_digest(members, digest)
    return snapshot


def parse_snapshot(data: bytes | str, where: str) -> AgentSessionSnapshot:
    """A stored snapshot, verified: well-formed, a known format, and its digest matches.

    Raises :class:`CorruptSnapshot` (naming ``where``) for anything unreadable or altered and
    :class:`UntrustedSnapshot` for a format this code does not know.
    """
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptSnapshot(where, f"not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CorruptSnapshot(where, "not a JSON object")
    fmt = document.get("format")
    if type(fmt) is int and fmt != SNAPSHOT_FORMAT:
        raise UntrustedSnapshot(
            f"{where}: snapshot format {fmt}; this code reads {SNAPSHOT_FORMAT}"
        )
    try:
        snapshot = AgentSessionSnapshot.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "document"
        raise CorruptSnapshot(where, f"{loc}: {first['msg']}") from None
    try:
        actual = digest_of(snapshot.content_bytes())
    except EventError as exc:
        raise CorruptSnapshot(where, f"content cannot be canonicalised ({exc})") from None
    if actual != snapshot.digest:
        raise CorruptSnapshot(where, f"digest mismatch: stored {snapshot.digest}, content {actual}")
    _check_scope(snapshot, where)
    return snapshot


_DIGEST_MEMBER = b',"digest":"' + DIGEST_PREFIX.encode()
_DIGEST_LENGTH = len(DIGEST_PREFIX) + 64


def verified_digest(data: bytes | str, where: str) -> str:
    """The digest of a stored snapshot, after checking the content it seals: a store calls it
    before *replacing* a snapshot, so an edited one is refused (kept as evidence), not erased.

    Fast path: the stored form is canonical, so its content bytes are the stored bytes without
    the top-level ``"digest"`` member, and one SHA-256 over them decides (no JSON parsing; a
    full :func:`parse_snapshot` of a 2.5 MB snapshot costs ~60 times more). Anything that does
    not pass it gets the full check, which raises :class:`CorruptSnapshot` naming ``where``.
    """
    raw = data.encode() if isinstance(data, str) else data
    start = raw.find(_DIGEST_MEMBER)
    while start != -1:
        value = start + len(b',"digest":"')
        end = value + _DIGEST_LENGTH
        if raw[end : end + 1] == b'"':
            claimed = raw[value:end].decode("ascii", "replace")
            if digest_of(raw[:start] + raw[end + 1 :]) == claimed:
                return claimed
        start = raw.find(_DIGEST_MEMBER, start + 1)
    return parse_snapshot(raw, where).digest


def _check_scope(snapshot: AgentSessionSnapshot, where: str) -> None:
    """Every event of the log belongs to the snapshot's tenant and session."""
    for index, event in enumerate(snapshot.event_log):
        if event.get("tenantId") != snapshot.tenant_id or event.get("sessionId") != (
            snapshot.session_id
        ):
            raise CorruptSnapshot(
                where,
                f"eventLog[{index}] belongs to {event.get('tenantId')}/{event.get('sessionId')}, "
                f"not {snapshot.tenant_id}/{snapshot.session_id}",
            )


def _fields(snapshot: AgentSessionSnapshot, *, with_digest: bool) -> dict[str, Any]:
    """The JSON-ready fields by wire name but the event log (it is spliced in)."""
    memory_from = snapshot.memory_from
    fields: dict[str, Any] = {
        "format": snapshot.format,
        "tenantId": snapshot.tenant_id,
        "sessionId": snapshot.session_id,
        "codeVersion": snapshot.code_version,
        "lastAppliedSequence": snapshot.last_applied_sequence,
        "memory": snapshot.memory,
        "compactResults": snapshot.compact_results,
        "memoryFrom": memory_from.model_dump(mode="json", by_alias=True) if memory_from else None,
        "nextOffsets": snapshot.next_offsets,
    }
    if with_digest:
        fields["digest"] = snapshot.digest
    return fields


def _digest(
    members: list[tuple[str, bytes]], events: list[bytes], log_digest: LogDigest | None
) -> str:
    """The digest of the content ``members`` (its log member made of ``events``): with
    ``log_digest``, the bytes around the log are hashed with the log's events between them,
    as :func:`_object` would join them, without joining the log again."""
    if log_digest is None:
        return digest_of(_object(members))
    at = [name for name, _ in members].index("eventLog")
    head = b"{" + b"".join(m + b"," for _, m in members[:at]) + b'"eventLog":['
    tail = b"]" + b"".join(b"," + m for _, m in members[at + 1 :]) + b"}"
    return DIGEST_PREFIX + log_digest.digest(head, events, tail)


def _canonical(snapshot: AgentSessionSnapshot, events: list[bytes], *, with_digest: bool) -> bytes:
    """RFC 8785 bytes of the snapshot object, splicing in the cached canonical events."""
    return _object(_members(_fields(snapshot, with_digest=with_digest), events))


def _members(fields: Mapping[str, Any], events: list[bytes]) -> list[tuple[str, bytes]]:
    """The object's members, ``fields`` and the log of ``events``, as (name, canonical
    ``"name":value`` bytes), in RFC 8785 order.

    Member names are ASCII, so sorting them by code point is the RFC's UTF-16 order.
    """
    members: list[tuple[str, bytes]] = []
    for name in sorted((*fields, "eventLog")):
        if name == "eventLog":
            value = b"[" + b",".join(events) + b"]"
        else:
            value = canonical_bytes(fields[name])
        members.append((name, _name(name) + value))
    return members


@functools.cache
def _name(name: str) -> bytes:
    """A member's ``"name":`` (a snapshot has a dozen names: each canonicalised once)."""
    return canonical_bytes(name) + b":"


def _object(members: list[tuple[str, bytes]]) -> bytes:
    return b"{" + b",".join(member for _, member in members) + b"}"


def _with_digest(members: list[tuple[str, bytes]], digest: str) -> bytes:
    """The stored form from the content's members: the ``digest`` member inserted at its
    sorted place, so the event log is joined once per save, not once more for the digest."""
    member = ("digest", b'"digest":' + canonical_bytes(digest))
    at = bisect.bisect([name for name, _ in members], "digest")
    return _object([*members[:at], member, *members[at:]])
