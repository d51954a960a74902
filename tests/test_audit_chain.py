"""The in-memory hash chain: known answers, the seed's tamper table, restore vs load, dedupe."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from runtrail.audit import (
    GENESIS_HASH,
    BrokenChainError,
    DuplicateEventConflict,
    HashChainedEventLog,
    Link,
    MalformedLink,
    canonical_event,
    verify_links,
)
from runtrail.audit.canonical import SealedEvent, link_hash
from runtrail.audit.link import seal
from runtrail.events import Actor, Event
from runtrail.events.runtime_events import ModelReasoning
from tests.audit_tampering import delete_link, overwrite_hash, swap_links, tamper_event

# --- known-answer vectors ------------------------------------------------------------------
# The canonical strings were written out by hand from RFC 8785's rules (sorted keys, no
# whitespace, 0.5 / 1e+21 / 1000000 number forms, literal UTF-8, "\n" escaped) and the hashes
# computed from those literal strings with hashlib alone; neither goes through runtrail.
CANONICAL = [
    '{"actor":{"id":"agent-7","kind":"agent"},"causationEventId":null,"correlationId":"corr-1",'
    '"data":{"prompt":{"messages":[{"content":"Résumé the log\\nthen stop","role":"user"}],'
    '"model":"m-1","temperature":0.5}},"eventId":"evt-1","occurredAt":"2024-05-01T12:00:00Z",'
    '"recordedAt":null,"runId":"run-1","schemaVersion":1,"sequence":"1","sessionId":"sess-1",'
    '"step":1,"tenantId":"acme","turnId":"turn-1","type":"MODEL_REQUEST"}',
    '{"actor":{"id":"agent-7","kind":"agent"},"causationEventId":"evt-1","correlationId":"corr-1",'
    '"data":{"arguments":{"limit":10,"path":"/tmp/a b"},"callId":"call-1","toolName":"read_file"},'
    '"eventId":"evt-2","occurredAt":"2024-05-01T12:00:01Z","recordedAt":null,"runId":"run-1",'
    '"schemaVersion":1,"sequence":"2","sessionId":"sess-1","step":1,"tenantId":"acme",'
    '"turnId":"turn-1","type":"TOOL_CALL"}',
    '{"actor":{"id":"agent-7","kind":"agent"},"causationEventId":"evt-2","correlationId":"corr-1",'
    '"data":{"callId":"call-1","error":null,"output":{"bytes":1000000,"ratio":1e+21,'
    '"text":"€ 😀"},"toolName":"read_file"},"eventId":"evt-3","occurredAt":"2024-05-01T12:00:02Z",'
    '"recordedAt":null,"runId":"run-1","schemaVersion":1,"sequence":"3","sessionId":"sess-1",'
    '"step":1,"tenantId":"acme","turnId":"turn-1","type":"TOOL_RESULT"}',
]
EXPECTED_HASHES = [
    "80a52bceb7ecd6ab00ee5a11de0a9571c3c931d8253bc24ecf93e233a0e3c5d3",
    "d96c51320a3a39b2e83faf8cf08db545aba343385b55f6d774aa6e69b259fdd1",
    "97e8d9c3f7e09eeb19b054d8a4a7e9e10e3d7e25c266cc6697a1989fbe5be57e",
]


def _common(event_id: str, seq: str, kind: str, cause: str | None) -> dict[str, Any]:
    # Deliberately not in canonical key order.
    return {
        "type": kind,
        "tenantId": "acme",
        "runId": "run-1",
        "eventId": event_id,
        "sequence": seq,
        "schemaVersion": 1,
        "occurredAt": f"2024-05-01T12:00:0{int(seq) - 1}Z",
        "recordedAt": None,
        "actor": {"kind": "agent", "id": "agent-7"},
        "causationEventId": cause,
        "correlationId": "corr-1",
        "sessionId": "sess-1",
        "turnId": "turn-1",
        "step": 1,
    }


def vector_events() -> list[dict[str, Any]]:
    """The three events of the known-answer chain, as Python values."""
    prompt = {
        "model": "m-1",
        "temperature": 0.5,
        "messages": [{"role": "user", "content": "Résumé the log\nthen stop"}],
    }
    return [
        {**_common("evt-1", "1", "MODEL_REQUEST", None), "data": {"prompt": prompt}},
        {
            **_common("evt-2", "2", "TOOL_CALL", "evt-1"),
            "data": {
                "toolName": "read_file",
                "callId": "call-1",
                "arguments": {"path": "/tmp/a b", "limit": 10},
            },
        },
        {
            **_common("evt-3", "3", "TOOL_RESULT", "evt-2"),
            "data": {
                "toolName": "read_file",
                "callId": "call-1",
                "output": {"text": "€ 😀", "bytes": 1_000_000, "ratio": 1.0e21},
                "error": None,
            },
        },
    ]


def event(seq: int, tenant: str = "acme", run: str = "run-1", **data: Any) -> dict[str, Any]:
    """A small runtime event in its JSON form."""
    return {
        "eventId": f"{tenant}-{run}-{seq}",
        "runId": run,
        "tenantId": tenant,
        "sequence": str(seq),
        "type": "MODEL_REASONING",
        "schemaVersion": 1,
        "occurredAt": "2024-05-01T12:00:00Z",
        "recordedAt": None,
        "actor": {"kind": "agent", "id": "a"},
        "causationEventId": None,
        "correlationId": "c",
        "sessionId": None,
        "turnId": None,
        "step": seq,
        "data": {"text": f"thought {seq}", **data},
    }


def sealed(n: int = 5) -> HashChainedEventLog:
    log = HashChainedEventLog()
    for seq in range(1, n + 1):
        log.append(event(seq))
    return log


def test_vectors_are_self_consistent() -> None:
    prev = "0" * 64
    for text, expected in zip(CANONICAL, EXPECTED_HASHES, strict=True):
        assert hashlib.sha256((prev + "|").encode() + text.encode()).hexdigest() == expected
        prev = expected


def test_canonical_form_matches_the_hand_written_bytes() -> None:
    for value, text in zip(vector_events(), CANONICAL, strict=True):
        assert canonical_event(value) == text.encode("utf-8")


def test_known_answer_chain() -> None:
    log = HashChainedEventLog()
    links = [log.append(value) for value in vector_events()]
    assert [link.hash for link in links] == EXPECTED_HASHES
    assert [link.prev_hash for link in links] == ["0" * 64, *EXPECTED_HASHES[:2]]
    assert [link.index for link in links] == [0, 1, 2]
    head = log.head()
    assert head is not None
    assert (head.tenant_id, head.run_id, head.length, head.hash) == (
        "acme",
        "run-1",
        3,
        EXPECTED_HASHES[2],
    )
    assert log.verify_chain().valid


def test_absent_and_null_hash_differently() -> None:
    with_null = event(1)
    without = {k: v for k, v in with_null.items() if k != "recordedAt"}
    a = HashChainedEventLog().append(with_null)
    b = HashChainedEventLog().append(without)
    assert a.hash != b.hash


def test_genesis_and_hash_format() -> None:
    link = sealed(1).links[0]
    assert link.prev_hash == GENESIS_HASH == "0" * 64
    assert len(link.hash) == 64 and link.hash == link.hash.lower()
    int(link.hash, 16)


# --- the seed's tamper table -----------------------------------------------------------------
def test_modified_payload_reports_that_index() -> None:
    log = sealed()
    tamper_event(log, 2, event(2, text="edited"))
    result = log.verify_chain()
    assert (result.valid, result.first_broken_index, result.reason) == (False, 2, "hash mismatch")
    assert result.length == 5


def test_modified_payload_of_first_and_last_link() -> None:
    for index in (0, 4):
        log = sealed()
        tamper_event(log, index, {**log.links[index].event, "step": 99})
        result = log.verify_chain()
        assert (result.first_broken_index, result.reason) == (index, "hash mismatch")


def test_deleted_middle_link_reports_its_position() -> None:
    log = sealed()
    delete_link(log, 2)
    result = log.verify_chain()
    assert (result.valid, result.first_broken_index, result.reason) == (
        False,
        2,  # the survivor now at position 2 (labelled 3) no longer chains
        "prevHash mismatch",
    )
    assert result.length == 4


def test_deleted_first_link() -> None:
    log = sealed()
    delete_link(log, 0)
    result = log.verify_chain()
    assert (result.first_broken_index, result.reason) == (0, "prevHash mismatch")


def test_swapped_pair_is_caught() -> None:
    log = sealed()
    swap_links(log, 1, 2)
    result = log.verify_chain()
    assert not result.valid
    # Position 1 now holds link 2, whose prevHash is link 1's hash, not link 0's.
    assert (result.first_broken_index, result.reason) == (1, "prevHash mismatch")


def test_swapped_events_with_relabelled_hashes_are_caught() -> None:
    # Swap only the payloads (as an editor of a table would): both hashes stop matching.
    log = sealed()
    first, second = log.links[1].event, log.links[2].event
    tamper_event(log, 1, second)
    tamper_event(log, 2, first)
    result = log.verify_chain()
    assert (result.first_broken_index, result.reason) == (1, "hash mismatch")


def test_modified_stored_hash() -> None:
    log = sealed()
    overwrite_hash(log, 3, "f" * 64)
    result = log.verify_chain()
    assert (result.first_broken_index, result.reason) == (3, "hash mismatch")


def test_relabelled_index_is_caught() -> None:
    log = sealed()
    links = list(log.links)
    links[2] = Link(7, links[2].event, links[2].prev_hash, links[2].hash)
    result = verify_links(links)
    assert (result.first_broken_index, result.reason) == (2, "index mismatch")


def test_untampered_chain_is_valid_and_reports_its_head() -> None:
    log = sealed()
    result = log.verify_chain()
    assert result.valid and result.first_broken_index is None and result.reason is None
    assert result.head_hash == log.links[-1].hash
    assert result.to_json() == {
        "valid": True,
        "length": 5,
        "firstBrokenIndex": None,
        "reason": None,
    }


# --- sealing rules ---------------------------------------------------------------------------
def test_reappending_the_same_event_id_does_not_seal_twice() -> None:
    log = sealed(3)
    again = log.append(event(2))
    assert again == log.links[1]
    assert len(log) == 3
    assert log.verify_chain().valid


def test_same_event_id_with_a_different_payload_is_refused() -> None:
    log = sealed(3)
    with pytest.raises(DuplicateEventConflict):
        log.append(event(2, text="something else"))
    assert len(log) == 3


def test_events_of_another_run_are_refused() -> None:
    log = sealed(2)
    with pytest.raises(MalformedLink):
        log.append(event(3, run="run-2"))
    with pytest.raises(MalformedLink):
        log.append(event(3, tenant="other"))
    assert len(log) == 2


def test_event_without_identity_is_refused() -> None:
    bad = event(1)
    del bad["eventId"]
    with pytest.raises(MalformedLink):
        HashChainedEventLog().append(bad)


def test_unsafe_integer_cannot_be_sealed() -> None:
    with pytest.raises(MalformedLink):
        HashChainedEventLog().append(event(1, big=2**53))


def test_caller_mutating_its_dict_does_not_change_the_sealed_event() -> None:
    log = HashChainedEventLog()
    value = event(1)
    log.append(value)
    value["data"]["text"] = "changed afterwards"
    assert log.verify_chain().valid
    assert log.links[0].event["data"]["text"] == "thought 1"


def test_on_event_is_best_effort() -> None:
    log = sealed(2)
    assert log.on_event(event(3, run="elsewhere")) is None
    assert log.rejected == 1
    link = log.on_event(event(3))
    assert link is not None and link.index == 2


def test_on_event_accepts_a_validated_event() -> None:
    current = Event(
        event_id="e-1",
        run_id="r-9",
        tenant_id="t-9",
        sequence=1,
        type="MODEL_REASONING",
        schema_version=1,
        occurred_at="2024-05-01T12:00:00Z",
        actor=Actor(kind="agent", id="a"),
        correlation_id="c",
        data=ModelReasoning(text="hm"),
    )
    log = HashChainedEventLog()
    link = log.on_event(current)
    assert link is not None
    assert link.event == current.json_form()
    assert log.sequence == 1


# --- restore vs load -------------------------------------------------------------------------
def test_restore_reseals_and_aligns_the_sequence() -> None:
    log = sealed(2)
    trusted = [event(5), event(9), event(7)]
    log.restore(trusted)
    assert len(log) == 3
    assert log.sequence == 9
    assert log.verify_chain().valid
    fresh = HashChainedEventLog()
    for value in trusted:
        fresh.append(value)
    assert log.links == fresh.links


def test_restore_repairs_a_tampered_chain() -> None:
    log = sealed()
    tamper_event(log, 1, event(2, text="edited"))
    assert not log.verify_chain().valid
    log.restore([link.event for link in log.links])
    assert log.verify_chain().valid


def test_restore_is_all_or_nothing() -> None:
    log = sealed(3)
    before = log.links
    with pytest.raises(MalformedLink):
        log.restore([event(1), event(2, run="other")])
    assert log.links == before


def test_load_links_keeps_stored_hashes_and_never_reseals() -> None:
    source = sealed()
    links = list(source.links)
    links[2] = Link(2, event(3, text="edited"), links[2].prev_hash, links[2].hash)
    log = HashChainedEventLog()
    result = log.load_links(links)
    assert (result.valid, result.first_broken_index, result.reason) == (False, 2, "hash mismatch")
    assert log.links == tuple(links)  # nothing re-sealed
    assert log.verify_chain() == result
    with pytest.raises(BrokenChainError):
        log.append(event(6))


def test_load_links_of_a_good_chain_continues_it() -> None:
    source = sealed(3)
    log = HashChainedEventLog()
    assert log.load_links(source.links).valid
    assert log.sequence == 3
    assert (log.tenant_id, log.run_id) == ("acme", "run-1")
    link = log.append(event(4))
    assert link.prev_hash == source.links[-1].hash
    assert log.append(event(1)) == source.links[0]  # known eventIds are still recognised
    source.append(event(4))
    assert log.links == source.links


def test_load_links_refuses_another_runs_chain_when_bound() -> None:
    other = HashChainedEventLog()
    other.append(event(1, run="run-2"))
    log = HashChainedEventLog("acme", "run-1")
    result = log.load_links(other.links)
    assert (result.valid, result.reason) == (False, "run mismatch")


# --- several tenants and runs ----------------------------------------------------------------
def test_interleaved_runs_of_several_tenants_give_independent_chains() -> None:
    keys = [("acme", "r1"), ("globex", "r1"), ("acme", "r2")]
    logs = {key: HashChainedEventLog(*key) for key in keys}
    for seq in range(1, 7):
        for tenant, run in keys:
            logs[(tenant, run)].append(event(seq, tenant=tenant, run=run))
    for key, log in logs.items():
        alone = HashChainedEventLog()
        for seq in range(1, 7):
            alone.append(event(seq, tenant=key[0], run=key[1]))
        assert log.links == alone.links
        assert log.verify_chain().valid
    acme_r1, globex_r1 = logs[("acme", "r1")], logs[("globex", "r1")]
    assert acme_r1.links[0].prev_hash == globex_r1.links[0].prev_hash == GENESIS_HASH
    assert acme_r1.links[0].hash != globex_r1.links[0].hash


def test_head_of_an_unbound_log_is_none_and_of_an_empty_bound_log_is_genesis() -> None:
    assert HashChainedEventLog().head() is None
    head = HashChainedEventLog("t", "r").head()
    assert head is not None and (head.length, head.hash) == (0, GENESIS_HASH)


def test_a_sealed_event_is_read_only_parsed_on_demand_and_keeps_its_hashed_bytes() -> None:
    """seal() keeps the canonical bytes it hashed, not a parsed copy (less for the GC to walk
    while a flush interval's links wait); reading it gives the event, and an in-memory edit
    of a nested value after a read is still caught by verification."""
    value = event(1)
    link = seal(0, GENESIS_HASH, value)
    sealed_event = link.event
    assert isinstance(sealed_event, SealedEvent) and sealed_event.unread
    assert (link.tenant_id, link.run_id, link.event_id) == (
        value["tenantId"],
        value["runId"],
        value["eventId"],
    )
    assert sealed_event.unread  # the IDs come from the link, not from parsing the event
    assert canonical_event(sealed_event) == link.canonical() == canonical_event(value)
    assert sealed_event == value and dict(sealed_event) == value
    with pytest.raises(TypeError):
        sealed_event["runId"] = "elsewhere"  # type: ignore[index]
    sealed_event["data"]["text"] = "edited in memory"
    assert link_hash(link.prev_hash, sealed_event) != link.hash
