"""Tombstones for an erased run on the compacted topics that copy its data: the resume cache's
entries and intents, and the latest snapshot of every session that applied the run.

Why: compaction keeps the latest value of every key for ever, so a cache entry or a session
pointer holding the run's references (or, for fields kept inline, its content) outlives an
erasure unless a null value replaces it; compaction then drops both. A record belongs to the
erasure when its key names an erased run, or its value holds a reference sealed by the
destroyed data key (a data subject's erasure spans runs the command does not name), inline or
in the large snapshot a session pointer names. The cache's ``run`` records (a run's last
sequence, no content) and ``position`` records stay: the service and its readers need them,
and they hold nothing of the run's content.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from runtrail.config import Settings
from runtrail.kafka.compacted import Latest, latest_records
from runtrail.kafka.output_topic import CONFIRM_TIMEOUT_S, OutputTopic
from runtrail.privacy.reference import key_marker

if TYPE_CHECKING:
    from runtrail.sessions.blobs import SnapshotBlobStore

#: the cache record types that hold an entry's or an intent's content
CACHE_CONTENT_TYPES = ("entry", "intent")


@dataclass(frozen=True, slots=True)
class ErasedScope:
    """What an erasure covers on the topics."""

    tenant: str
    runs: Collection[str] = ()
    sessions: Collection[str] = ()
    #: the destroyed data key: records holding references it sealed are the erasure's too
    key_id: str | None = None

    def sealed_by_key(self, value: bytes) -> bool:
        return self.key_id is not None and key_marker(self.key_id).encode() in value


def cache_keys(records: dict[bytes, Latest], scope: ErasedScope) -> dict[bytes, int]:
    """The cache topic's live entry and intent keys of the scope, with their partitions."""
    found: dict[bytes, int] = {}
    for key, latest in records.items():
        if latest.value is None:
            continue
        parts = _json(key)
        if not isinstance(parts, list) or len(parts) < 3 or parts[0] not in CACHE_CONTENT_TYPES:
            continue
        if parts[1] == scope.tenant and (
            parts[2] in scope.runs or scope.sealed_by_key(latest.value)
        ):
            found[key] = latest.partition
    return found


def session_keys(
    records: dict[bytes, Latest],
    scope: ErasedScope,
    blob_sealed: Callable[[str], bool] | None = None,
) -> dict[bytes, int]:
    """The sessions topic's live pointers of the scope: sessions named, or that applied an
    erased run's events, or that hold references sealed by the destroyed key — inline, or in
    the large snapshot a pointer names (``blob_sealed`` opens it: the pointer carries none)."""
    found: dict[bytes, int] = {}
    for key, latest in records.items():
        if latest.value is None:
            continue
        pointer = _json(latest.value)
        if not isinstance(pointer, dict) or pointer.get("tenantId") != scope.tenant:
            continue
        applied = pointer.get("lastAppliedSequence") or {}
        blob = pointer.get("snapshotRef")
        if (
            pointer.get("sessionId") in scope.sessions
            or any(run in applied for run in scope.runs)
            or scope.sealed_by_key(latest.value)
            or (isinstance(blob, str) and blob_sealed is not None and blob_sealed(blob))
        ):
            found[key] = latest.partition
    return found


def tombstone_cache(settings: Settings, scope: ErasedScope) -> int:
    """Tombstone the scope's records on the resume-cache topic; how many."""
    topic = settings.resume_cache_topic
    return write_tombstones(settings, topic, cache_keys(latest_records(settings, topic), scope))


def tombstone_sessions(
    settings: Settings, scope: ErasedScope, blobs: SnapshotBlobStore | None = None
) -> list[str]:
    """Tombstone the scope's session pointers on the sessions topic; the sessions they named
    (whose snapshots and large snapshots' blobs the erasure deletes next). With ``blobs``, a
    pointer to a blob is the scope's when the blob holds a reference sealed by the destroyed
    key; a reference outside ``blobs`` raises ``SessionStoreError`` (it cannot be searched)."""
    topic = settings.sessions_topic
    records = latest_records(settings, topic)

    def blob_sealed(reference: str) -> bool:
        data = blobs.read(reference) if blobs is not None and scope.key_id else None
        return data is not None and scope.sealed_by_key(data)

    found = session_keys(records, scope, blob_sealed)
    write_tombstones(settings, topic, found)
    return [str(_json(records[key].value or b"{}")["sessionId"]) for key in found]


def write_tombstones(settings: Settings, topic: str, keys: Mapping[bytes, int | None]) -> int:
    """A null value for every key, in the partition its record lives in (None: the one its
    key hashes to, as the topic's writers put it), all acknowledged; how many.
    ``StoreUnavailable`` if the broker does not acknowledge them in time."""
    if not keys:
        return 0
    out = OutputTopic(settings, topic, client_id="runtrail-erase")
    try:
        for key, partition in keys.items():
            out.send(key, None, tag=key, partition=partition)
        out.confirm(CONFIRM_TIMEOUT_S)
    finally:
        out.close()
    return len(keys)


def _json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
