"""A record's JSON object is its fields under camelCase keys, in declaration order, and reads
back into the same record: the derivation (``camel_fields``) and the records that use it."""

from __future__ import annotations

from dataclasses import dataclass

from runtrail.audit.link import RunHead
from runtrail.camel_json import camel_fields
from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.keys import Kind


@dataclass(frozen=True)
class _Record:
    tenant_id: str
    first_seen_ms: int
    kind: Kind


def test_every_field_under_its_camel_case_key_in_declaration_order() -> None:
    record = _Record("acme", 12, Kind.TOOL)
    assert list(camel_fields(record).items()) == [
        ("tenantId", "acme"),
        ("firstSeenMs", 12),
        ("kind", Kind.TOOL),
    ]


def test_given_values_replace_those_of_their_fields_only() -> None:
    record = _Record("acme", 12, Kind.TOOL)
    assert camel_fields(record, kind=record.kind.value) == {
        "tenantId": "acme",
        "firstSeenMs": 12,
        "kind": "tool",
    }


def test_the_records_that_derive_their_json_read_it_back() -> None:
    intent = Intent("acme", "run-1", "i-1", "k", "search", "call-1", {"q": 1}, 3, "t", "s")
    entry = CacheEntry("acme", "run-1", Kind.TOOL, "k", {"hits": 2}, 3, "t", "call-1", "search")
    state = RunState("acme", "run-1", 7, (intent,))
    head = RunHead("acme", "run-1", 4, "ab" * 32)
    assert Intent.from_json(intent.to_json()) == intent
    assert CacheEntry.from_json(entry.to_json()) == entry
    assert RunState.from_json(state.to_json()) == state
    assert RunHead.from_json(head.to_json()) == head
    assert list(entry.to_json())[:3] == ["tenantId", "runId", "kind"]
    assert entry.to_json()["kind"] == "tool"
