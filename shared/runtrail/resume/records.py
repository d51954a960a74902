"""The compacted cache topic's records: entries, open intents and the service's positions.

Keys are JSON arrays (so no separator can be smuggled inside a tenant or run ID), and always
start with the record type and, for data, the tenant: ``["entry", tenant, run, kind, key]``,
``["intent", tenant, run, intentId]`` (a tombstone — null value — once the call's outcome is
recorded), ``["run", tenant, run]`` (the run's last sequence, so a resumed run continues it), ``["position", eventsTopic, partition]`` (how far the service had made its store
durable: what read-your-writes needs when reading the topic instead of the service).

Compaction keeps the latest value per key, so the topic is a complete, self-contained cache
that a client can bootstrap from with no service at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from runtrail.resume.entry import CacheEntry, Intent

Record = tuple[bytes, bytes | None]


def entry_record(entry: CacheEntry) -> Record:
    key = ["entry", entry.tenant_id, entry.run_id, entry.kind.value, entry.key]
    return orjson.dumps(key), orjson.dumps(entry.to_json())


def entry_tombstone(tenant: str, run_id: str, kind: str, key: str) -> Record:
    """The null value that deletes an entry from the topic (retention pruned it)."""
    return orjson.dumps(["entry", tenant, run_id, kind, key]), None


def intent_record(intent: Intent) -> Record:
    key = ["intent", intent.tenant_id, intent.run_id, intent.intent_id]
    return orjson.dumps(key), orjson.dumps(intent.to_json())


def intent_tombstone(tenant: str, run_id: str, intent_id: str) -> Record:
    return orjson.dumps(["intent", tenant, run_id, intent_id]), None


def run_record(tenant: str, run_id: str, last_sequence: int) -> Record:
    return orjson.dumps(["run", tenant, run_id]), orjson.dumps({"lastSequence": last_sequence})


def position_record(events_topic: str, partition: int, next_offset: int) -> Record:
    key = orjson.dumps(["position", events_topic, partition])
    return key, orjson.dumps({"nextOffset": next_offset})


@dataclass(frozen=True, slots=True)
class ParsedRecord:
    """One record read back: exactly one of the payload fields is set (or none: a tombstone)."""

    type: str
    key: tuple[Any, ...]
    entry: CacheEntry | None = None
    intent: Intent | None = None
    #: a position's next offset, or a run's last sequence
    next_offset: int | None = None


def parse_record(key: bytes | None, value: bytes | None) -> ParsedRecord | None:
    """The record, or None when it is not one of ours (it is skipped, not fatal)."""
    if key is None:
        return None
    try:
        parts = orjson.loads(key)
        if not isinstance(parts, list) or not parts:
            return None
        kind = parts[0]
        body = orjson.loads(value) if value is not None else None
        if kind == "entry" and len(parts) == 5:
            entry = CacheEntry.from_json(body) if body is not None else None
            return ParsedRecord("entry", tuple(parts), entry=entry)
        if kind == "intent" and len(parts) == 4:
            intent = Intent.from_json(body) if body is not None else None
            return ParsedRecord("intent", tuple(parts), intent=intent)
        if kind == "run" and len(parts) == 3 and isinstance(body, dict):
            return ParsedRecord("run", tuple(parts), next_offset=int(body["lastSequence"]))
        if kind == "position" and len(parts) == 3 and isinstance(body, dict):
            return ParsedRecord("position", tuple(parts), next_offset=int(body["nextOffset"]))
    except (orjson.JSONDecodeError, ValueError, KeyError, TypeError):
        return None
    return None
