"""Thread checkpoint records: sealed like session snapshots, stored beside them, chosen by URL.

A framework checkpointer (the LangGraph one in :mod:`runtrail.adapters.langgraph_checkpoint`)
stores three kinds of record per thread: ``checkpoint`` (one per step), ``blob`` (one channel
value at one version) and ``write`` (one pending write of a task). This module knows nothing
about LangGraph; it keeps the rules every record obeys, the same rules as session snapshots:

* every key carries the tenant: ``(tenant, thread, kind, namespace, a, b, c)``;
* a stored record is the RFC 8785 canonical bytes of its fields *and its key*, sealed by
  ``digest`` (``sha256:<hex>`` over everything else), so an edited byte, or a record copied under
  another key (another tenant or thread), is refused on read with :class:`CorruptCheckpoint`
  naming the file or row, never silently used;
* ``open_store(LANGGRAPH_CHECKPOINTS, url)`` takes the same URLs as the session store (``file:///dir``,
  ``postgresql://…``); the records live beside the session snapshots without touching them;
* :meth:`CheckpointBackend.threads_holding` finds the threads that hold a runtrail run or a
  data key's references, so an erasure needs no list of threads from its caller.
"""

from __future__ import annotations

import base64
from abc import abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from runtrail.events import EventError, canonical_bytes
from runtrail.sessions.base import ClosableStore
from runtrail.sessions.errors import CorruptSnapshot, SessionStoreError
from runtrail.sessions.snapshot import digest_of

#: Layout of a stored record; a reader refuses layouts it does not know.
RECORD_FORMAT = 1
KINDS = ("checkpoint", "blob", "write")

#: (tenant, thread, kind, namespace, a, b, c): what a record is stored under.
Key = tuple[str, str, str, str, str, str, str]


class CorruptCheckpoint(CorruptSnapshot):
    """A stored checkpoint record is unreadable, altered, or not the one its key names.

    A :class:`CorruptSnapshot`, so code that refuses corrupted session state refuses this too.
    """

    def __init__(self, where: str, reason: str) -> None:
        SessionStoreError.__init__(self, f"corrupted checkpoint record {where}: {reason}")
        self.where = where
        self.reason = reason


class Prefix(NamedTuple):
    """The leading parts of a :data:`Key` a scan is bounded by: a tenant and kind, then
    optionally the thread, the namespace and the first key part (each only with those before)."""

    tenant: str
    kind: str
    thread: str | None = None
    ns: str | None = None
    a: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """One record to store; ``replace`` False keeps a record already stored under the key."""

    key: Key
    data: bytes
    replace: bool = True


def make_key(tenant: str, thread: str, kind: str, ns: str, *rest: str) -> Key:
    """A full key: ``rest`` (up to three parts) is padded with empty strings."""
    if kind not in KINDS:
        raise ValueError(f"unknown checkpoint record kind {kind!r}")
    if not tenant or not thread:
        raise ValueError("a checkpoint record needs a tenant and a thread ID")
    if len(rest) > 3:
        raise ValueError(f"a {kind} key has at most three parts after the namespace")
    a, b, c = (*rest, "", "", "")[:3]
    return (tenant, thread, kind, ns, a, b, c)


def typed_json(value: tuple[str, bytes]) -> dict[str, str]:
    """A serializer's ``(type, bytes)`` as JSON (the bytes in base64)."""
    return {"type": value[0], "data": base64.b64encode(value[1]).decode("ascii")}


def typed_value(document: Any, where: str) -> tuple[str, bytes]:
    """The ``(type, bytes)`` back from :func:`typed_json`."""
    try:
        return str(document["type"]), base64.b64decode(document["data"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpoint(where, f"a typed value is malformed ({exc})") from None


def seal_record(key: Key, fields: dict[str, Any]) -> bytes:
    """The stored form of a record: canonical bytes of key, fields and digest."""
    content = canonical_bytes({"format": RECORD_FORMAT, "key": list(key), "fields": fields})
    # "digest" sorts before every other member, so the sealed form is the content with the
    # digest member spliced in first: the (possibly large) fields are canonicalised once.
    return b'{"digest":' + canonical_bytes(digest_of(content)) + b"," + content[1:]


def open_record(data: bytes | str, where: str) -> tuple[Key, dict[str, Any]]:
    """A stored record, verified (format, digest); its key and fields.

    Raises :class:`CorruptCheckpoint` naming ``where`` when anything does not hold.
    """
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptCheckpoint(where, f"not JSON ({exc})") from None
    if not isinstance(document, dict) or set(document) != {"format", "key", "fields", "digest"}:
        raise CorruptCheckpoint(where, "not a checkpoint record (format, key, fields, digest)")
    if document["format"] != RECORD_FORMAT:
        raise CorruptCheckpoint(
            where, f"record format {document['format']!r}; this code reads {RECORD_FORMAT}"
        )
    stored = document.pop("digest")
    try:
        actual = digest_of(canonical_bytes(document))
    except EventError as exc:
        raise CorruptCheckpoint(where, f"content cannot be canonicalised ({exc})") from None
    if actual != stored:
        raise CorruptCheckpoint(where, f"digest mismatch: stored {stored}, content {actual}")
    key = document["key"]
    fields = document["fields"]
    if (
        not isinstance(key, list)
        or len(key) != 7
        or not all(isinstance(p, str) for p in key)
        or not isinstance(fields, dict)
    ):
        raise CorruptCheckpoint(where, "key or fields malformed")
    return (key[0], key[1], key[2], key[3], key[4], key[5], key[6]), fields


class CheckpointBackend(ClosableStore):
    """Stores sealed records by key; the record layer (above) verifies what it reads."""

    @abstractmethod
    def put(self, rows: Sequence[Row]) -> None:
        """Store ``rows`` in order (the last one is what makes the others reachable)."""

    @abstractmethod
    def get(self, key: Key) -> tuple[str, bytes] | None:
        """(where, stored bytes) of one record, or None."""

    def get_many(self, keys: Sequence[Key]) -> dict[Key, tuple[str, bytes]]:
        """(where, stored bytes) of each of ``keys`` that is stored (one round trip where the
        backend can: a checkpoint's channel values are read together)."""
        found: dict[Key, tuple[str, bytes]] = {}
        for key in keys:
            record = self.get(key)
            if record is not None:
                found[key] = record
        return found

    @abstractmethod
    def newest(self, tenant: str, kind: str, thread: str, ns: str) -> str | None:
        """The greatest first key part (``a``: the checkpoint ID) stored under the prefix, found
        without reading every record: "the latest checkpoint" must not cost the whole thread."""

    @abstractmethod
    def scan(self, prefix: Prefix) -> list[tuple[str, bytes]]:
        """(where, stored bytes) of every record under ``prefix``."""

    @abstractmethod
    def delete(self, keys: Sequence[Key]) -> None:
        """Remove the records under ``keys`` (absent ones are ignored)."""

    @abstractmethod
    def delete_thread(self, tenant: str, thread: str) -> None:
        """Remove every record of one thread."""

    @abstractmethod
    def threads(self, tenant: str) -> list[str]:
        """The thread IDs of a tenant that hold records."""

    @abstractmethod
    def tenants(self) -> list[str]:
        """The tenants that hold records (a service's retention spans them all)."""

    @abstractmethod
    def locate(self, key: Key) -> str:
        """Where the record of ``key`` is stored (a path, a row): what ``get``/``scan`` name."""

    def threads_holding(
        self, tenant: str, runs: Collection[str], text: str | None = None
    ) -> list[str]:
        """The IDs (sorted) of the tenant's threads with a checkpoint of one of ``runs`` (the
        runtrail run stamped in its metadata, ``runtrailRun``) or a record whose values
        contain ``text`` (an erasure's destroyed key, as its references spell it): the threads
        an erasure must delete without being told their names. Values are the serializer's
        bytes (base64 in the record), searched as bytes: a reference is a plain string in
        every serializer LangGraph ships, unless it encrypts. It reads every record of the
        tenant (unverified: an altered record is found too), so it is for an erasure, not a
        hot path."""
        wanted = set(runs)
        needle = text.encode() if text else None
        found: set[str] = set()
        for kind in KINDS:
            for _, data in self.scan(Prefix(tenant, kind)):
                thread = _thread_holding(data, wanted, needle)
                if thread is not None:
                    found.add(thread)
        return sorted(found)

    def read(self, key: Key) -> dict[str, Any] | None:
        """The verified fields of one record, or None; CorruptCheckpoint if it is not sound."""
        found = self.get(key)
        if found is None:
            return None
        where, data = found
        return _opened_as(key, where, data)

    def read_many(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        """The verified fields of each of ``keys`` that is stored (see :meth:`read`)."""
        return {
            key: _opened_as(key, where, data) for key, (where, data) in self.get_many(keys).items()
        }

    def read_all(
        self,
        tenant: str,
        kind: str,
        thread: str | None = None,
        ns: str | None = None,
        a: str | None = None,
    ) -> list[tuple[Key, dict[str, Any]]]:
        """Every verified record a :meth:`scan` finds, each checked to be stored where its
        sealed key says (a record copied into another tenant or thread is refused)."""
        records: list[tuple[Key, dict[str, Any]]] = []
        for where, data in self.scan(Prefix(tenant, kind, thread, ns, a)):
            sealed, fields = open_record(data, where)
            if self.locate(sealed) != where:
                raise CorruptCheckpoint(where, f"sealed for {sealed}, stored elsewhere")
            records.append((sealed, fields))
        records.sort(key=lambda r: r[0])
        return records


def _thread_holding(data: bytes, runs: set[str], needle: bytes | None) -> str | None:
    """The thread of a stored record that names one of ``runs`` or holds ``needle``; None
    otherwise, or when the record is not even JSON (nothing can read it either)."""
    try:
        document = orjson.loads(data)
        thread = str(document["key"][1])
        fields = document["fields"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(fields, dict):
        return None
    run = fields.get("runtrailRun")
    if isinstance(run, str) and run in runs:
        return thread
    if needle is None:
        return None
    if needle in data:
        return thread
    for value in fields.values():
        if isinstance(value, dict) and isinstance(value.get("data"), str):
            try:
                if needle in base64.b64decode(value["data"]):
                    return thread
            except ValueError:
                continue
    return None


def _opened_as(key: Key, where: str, data: bytes) -> dict[str, Any]:
    """The verified fields of a record read under ``key``; CorruptCheckpoint if it is not sound
    or was sealed for another key (a record copied over another is refused)."""
    sealed, fields = open_record(data, where)
    if sealed != key:
        raise CorruptCheckpoint(where, f"sealed for {sealed}, stored as {key}")
    return fields
