"""The audit service in-process: sealing order, de-duplication, positions, revokes, tree heads.

No broker here: batches of :class:`Delivered` are handed to the service directly, the store is
SQLite (PostgreSQL passes the same store contract, tests/test_audit_store_contract.py), and
the audit topic's producer is the in-memory fake. The end-to-end tests with a real broker,
real PostgreSQL and SIGKILLs are in tests/test_audit_service_e2e.py.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Message
from prometheus_client import CollectorRegistry

from runtrail.audit import (
    GENESIS_HASH,
    ChainConflict,
    link_hash,
    seal,
    verify_stored,
    verify_tree_head,
)
from runtrail.audit.store import LinkStore
from runtrail.config import Settings
from runtrail.events import EventCodec, validate_json_form
from runtrail.events.jsonform import canonical_bytes_reference
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import file_path, sqlite_url
from runtrail.runtime import Delivered, ServiceContext
from runtrail_services.audit import service as service_module
from runtrail_services.audit.messages import KIND_HEADER, link_line
from runtrail_services.audit.positions import published_name
from runtrail_services.audit.publishing import AuditTopic
from runtrail_services.audit.service import AuditService
from runtrail_services.audit.settings import AuditSettings
from tests.checkpoint_support import assign
from tests.fake_producer import FakeProducer
from tests.support import form

TOPIC = "events"
AUDIT_TOPIC = "audit"
CODEC = EventCodec()


class Harness:
    """An AuditService with a recording dead-letter function and a fake audit producer."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: str) -> None:
        self.tmp_path = tmp_path
        self.producer = FakeProducer()
        self.dead: list[tuple[str, str, str]] = []
        self.registry = CollectorRegistry()
        monkeypatch.setattr(
            service_module,
            "AuditTopic",
            functools.partial(AuditTopic, producer_factory=lambda config: self.producer),
        )
        self.settings = Settings(
            state_dir=tmp_path / "state",
            events_topic=TOPIC,
            audit_topic=AUDIT_TOPIC,
            delivery_timeout_ms=1000,
        )
        self.options = {"tree_head_interval_s": "0", **options}
        self.service = self.start()

    def start(self) -> AuditService:
        context = ServiceContext(
            settings=self.settings,
            options=self.options,
            registry=CollectorRegistry(),
            dead_letter=lambda d, reason, detail: self.dead.append(
                (d.event.event_id, reason, detail)
            ),
        )
        self.registry = context.registry
        return AuditService(context)

    def restart(self) -> AuditService:
        self.service.close()
        self.service = self.start()
        return self.service

    @property
    def url(self) -> str:
        return AuditSettings.load(self.options).resolved_store_url(self.settings.state_dir)

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"service": "audit", **labels})
        return 0.0 if value is None else value

    def published(self) -> list[dict[str, Any]]:
        self.producer.poll(0)
        return [
            json.loads(m.value)
            for m in self.producer.log
            if dict(m.headers)[KIND_HEADER] == b"link"
        ]


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    h = Harness(tmp_path, monkeypatch)
    yield h
    h.service.close()


def delivered(f: dict[str, Any], offset: int, partition: int = 0) -> Delivered:
    """``f`` as the runtime hands it to the audit: the event read from its body, which the
    sealer writes the canonical form of (no written form: ``reads_written = False``)."""
    value, key = CODEC.encode_json_form(f), f["runId"].encode()
    return Delivered(
        CODEC.decode_event_only(value),
        None,
        TOPIC,
        partition,
        offset,
        0,
        key,
        Message(value=value, key=key, topic=TOPIC, partition=partition, offset=offset),
    )


def delivered_with_written(f: dict[str, Any], offset: int, partition: int = 0) -> Delivered:
    """``f`` with its written form, as the runtime hands it when a depth walk read that form
    (or as a replay builds it by hand)."""
    return Delivered(validate_json_form(f), f, TOPIC, partition, offset, 0, f["runId"].encode())


def run_forms(run: str, count: int, tenant: str = "t1", start: int = 1) -> list[dict[str, Any]]:
    return [
        form(run_id=run, tenant=tenant, sequence=seq, eventId=f"{tenant}-{run}-{seq}")
        for seq in range(start, start + count)
    ]


def batch_of(
    forms: list[dict[str, Any]], first_offset: int = 0, partition: int = 0
) -> list[Delivered]:
    return [delivered(f, first_offset + i, partition) for i, f in enumerate(forms)]


def interleave(*runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for group in itertools.zip_longest(*runs):
        out.extend(f for f in group if f is not None)
    return out


def opened(h: Harness) -> LinkStore:
    return open_store(AUDIT_LINKS, h.url)


# --- sealing ---------------------------------------------------------------------------------
def test_each_run_gets_its_own_chain_in_topic_order(harness: Harness) -> None:
    a, b = run_forms("run-a", 4), run_forms("run-b", 4, tenant="t2")
    same_id_other_tenant = run_forms("run-a", 2, tenant="t2")
    harness.service.on_assigned([(TOPIC, 0)])
    harness.service.process(batch_of(interleave(a, b, same_id_other_tenant)))
    harness.service.flush()
    store = opened(harness)
    try:
        for tenant, run, forms in (
            ("t1", "run-a", a),
            ("t2", "run-b", b),
            ("t2", "run-a", same_id_other_tenant),
        ):
            chain = store.load_chain(tenant, run)
            assert [link.event for link in chain] == forms
            assert verify_stored(store, tenant, run).valid
        first = store.load_chain("t1", "run-a")[0]
        assert first.prev_hash == GENESIS_HASH
        assert first.hash == link_hash(GENESIS_HASH, a[0])  # the event as written, JCS
        assert store.stored_offsets(TOPIC, [0]) == {0: 10}
        assert store.stored_offsets(published_name(TOPIC), [0]) == {}  # sent, not confirmed
        harness.service.flush()  # the next flush confirms them and records it
        assert store.stored_offsets(published_name(TOPIC), [0]) == {0: 10}
    finally:
        store.close()
    assert harness.metric("runtrail_audit_links_sealed_total") == 10
    assert harness.metric("runtrail_audit_chains_started_total") == 3


def test_links_go_to_the_audit_topic_after_the_commit_keyed_by_run(harness: Harness) -> None:
    forms = run_forms("run-a", 3)
    harness.service.on_assigned([(TOPIC, 0)])
    harness.service.process(batch_of(forms))
    assert harness.producer.log == []  # nothing before the flush
    harness.service.flush()
    harness.producer.poll(0)
    store = opened(harness)
    chain = store.load_chain("t1", "run-a")
    store.close()
    assert [(m.topic, m.key, m.value) for m in harness.producer.log] == [
        (AUDIT_TOPIC, b"run-a", link_line(link)) for link in chain
    ]
    harness.service.flush()
    assert harness.metric("runtrail_audit_links_published_total") == 3  # confirmed


def test_a_flush_continues_chains_across_batches_and_restarts(
    harness: Harness,
) -> None:
    forms = run_forms("run-a", 6)
    harness.service.on_assigned([(TOPIC, 0)])
    harness.service.process(batch_of(forms[:2]))
    harness.service.flush()
    harness.service.process(batch_of(forms[2:4], 2))
    harness.service.flush()
    service = harness.restart()
    assert assign(service, [(TOPIC, 0)]) == {(TOPIC, 0): 4}
    service.process(batch_of(forms[4:], 4))
    service.flush()
    store = opened(harness)
    try:
        assert [link.event for link in store.load_chain("t1", "run-a")] == forms
        assert verify_stored(store, "t1", "run-a").valid
    finally:
        store.close()


def test_already_sealed_event_ids_are_looked_up_once_per_batch_and_tenant(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    forms = interleave(
        run_forms("run-a", 50), run_forms("run-b", 50), run_forms("run-c", 50, tenant="t2")
    )
    calls: list[tuple[str, int]] = []
    heads_calls: list[int] = []
    store = harness.service.store
    real_find, real_heads = store.find_events, store.heads_of

    def find_events(tenant: str, ids: Any) -> Any:
        ids = list(ids)
        calls.append((tenant, len(ids)))
        return real_find(tenant, ids)

    def heads_of(runs: Any) -> Any:
        runs = list(runs)
        heads_calls.append(len(runs))
        return real_heads(runs)

    monkeypatch.setattr(store, "find_events", find_events)
    monkeypatch.setattr(store, "heads_of", heads_of)
    harness.service.on_assigned([(TOPIC, 0)])
    harness.service.process(batch_of(forms))
    assert sorted(calls) == [("t1", 100), ("t2", 50)]
    assert heads_calls == [3]  # the three new runs' heads, in one query
    harness.service.process(batch_of(run_forms("run-a", 5, start=51), 150))
    assert heads_calls == [3]  # a known run's head is in memory


def test_a_redelivered_event_is_not_sealed_again(harness: Harness) -> None:
    forms = run_forms("run-a", 4)
    harness.service.on_assigned([(TOPIC, 0)])
    harness.service.process(batch_of(forms[:3]))
    harness.service.process([delivered(forms[1], 3)])  # the same event again, unflushed
    harness.service.flush()
    harness.service.process([delivered(forms[0], 4), delivered(forms[3], 5)])  # from the store
    harness.service.flush()
    store = opened(harness)
    try:
        chain = store.load_chain("t1", "run-a")
        assert [link.event for link in chain] == forms
        assert store.stored_offsets(TOPIC, [0]) == {0: 6}
    finally:
        store.close()
    assert harness.metric("runtrail_audit_redeliveries_total") == 2
    assert harness.dead == []
    assert len(harness.published()) == 4  # a plain resend is not re-published


def test_an_event_id_reused_with_another_payload_is_dead_lettered(harness: Harness) -> None:
    forms = run_forms("run-a", 2)
    harness.service.on_assigned([(TOPIC, 0)])
    harness.service.process(batch_of(forms))
    harness.service.flush()
    impostor = {**forms[0], "data": {"message": "rewritten", "raw": None}}
    harness.service.process([delivered(impostor, 2)])
    harness.service.flush()
    assert [(eid, reason) for eid, reason, _ in harness.dead] == [
        (forms[0]["eventId"], "audit-conflict")
    ]
    assert harness.metric("runtrail_audit_events_refused_total", reason="audit-conflict") == 1
    store = opened(harness)
    try:
        assert len(store.load_chain("t1", "run-a")) == 2
        assert store.stored_offsets(TOPIC, [0]) == {0: 3}  # refused, not stuck
    finally:
        store.close()


def test_the_consumed_body_and_the_written_form_seal_the_same_links_as_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forms = run_forms("run-a", 4)
    # values the compiled writer leaves to Python: floats outside its exact range, a key
    # beyond the Basic Multilingual Plane (UTF-16 order)
    odd = {"tiny": 1e-7, "big": 1e300, "k\U0001f600": 1, "k\uffff": 2}
    forms[2] = {**forms[2], "data": {"message": "odd", "raw": odd}}
    chains = []
    for make in (delivered, delivered_with_written):
        h = Harness(tmp_path / make.__name__, monkeypatch)
        h.service.on_assigned([(TOPIC, 0)])
        h.service.process([make(f, i) for i, f in enumerate(forms)])
        h.service.flush()
        store = opened(h)
        try:
            chains.append(
                [(link.hash, link.canonical()) for link in store.load_chain("t1", "run-a")]
            )
        finally:
            store.close()
            h.service.close()
        assert h.dead == []
    assert chains[0] == chains[1]
    expected, prev = [], GENESIS_HASH
    for f in forms:  # the rfc8785 package's bytes of each form, hashed as the format says
        canonical = canonical_bytes_reference(f)
        prev = hashlib.sha256(prev.encode() + b"|" + canonical).hexdigest()
        expected.append((prev, canonical))
    assert chains[0] == expected


def test_an_event_with_no_canonical_form_is_dead_lettered(harness: Harness) -> None:
    forms = run_forms("run-a", 3)
    huge = {**forms[1], "data": {"message": "n", "raw": {"count": 2**60}}}  # beyond 2^53
    harness.service.on_assigned([(TOPIC, 0)])
    harness.service.process(batch_of([forms[0], huge, forms[2]]))
    harness.service.flush()
    assert [reason for _, reason, _ in harness.dead] == ["unsealable"]
    store = opened(harness)
    try:
        chain = store.load_chain("t1", "run-a")
        assert [link.event["eventId"] for link in chain] == [
            forms[0]["eventId"],
            forms[2]["eventId"],
        ]
        assert verify_stored(store, "t1", "run-a").valid
    finally:
        store.close()


# --- positions -------------------------------------------------------------------------------
def test_a_partition_with_no_stored_position_starts_at_the_beginning(harness: Harness) -> None:
    assert assign(harness.service, [(TOPIC, 0), (TOPIC, 1)]) == {
        (TOPIC, 0): OFFSET_BEGINNING,
        (TOPIC, 1): OFFSET_BEGINNING,
    }


def test_links_sealed_but_not_confirmed_published_are_published_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the store's commit and the topic's acknowledgement: the restart starts
    at the published position, finds the events sealed, and publishes their stored links."""
    h = Harness(tmp_path, monkeypatch)
    forms = run_forms("run-a", 5)
    h.service.on_assigned([(TOPIC, 0)])
    h.service.process(batch_of(forms[:2]))
    h.service.flush()
    h.producer.mode = "down"  # the audit topic stops acknowledging
    h.service.process(batch_of(forms[2:4], 2))
    h.service.flush()  # committed and sent; the first batch confirmed (published up to 2)
    with pytest.raises(Exception, match=r"unacknowledged|failed"):
        h.service.flush()  # the second batch is not confirmed: the runtime stops, no commit
    h.producer.log.clear()
    service = h.restart()  # stopped while the topic is still down: the links are not confirmed
    h.producer.mode = "up"
    assert assign(service, [(TOPIC, 0)]) == {(TOPIC, 0): 2}  # published, not sealed (4)
    service.process(batch_of(forms[2:], 2))  # re-delivered from offset 2, plus one new
    service.flush()
    service.flush()
    store = opened(h)
    try:
        chain = store.load_chain("t1", "run-a")
        assert [link.event for link in chain] == forms  # nothing sealed twice
        assert store.stored_offsets(published_name(TOPIC), [0]) == {0: 5}
    finally:
        store.close()
    assert [p["index"] for p in h.published()] == [2, 3, 4]
    assert h.published()[0] == json.loads(link_line(chain[2]))
    h.service.close()


def test_a_replay_cut_short_by_another_crash_still_republishes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, monkeypatch)
    forms = run_forms("run-a", 6)
    h.service.on_assigned([(TOPIC, 0)])
    h.service.process(batch_of(forms[:1]))
    h.service.flush()
    h.producer.mode = "down"
    h.service.process(batch_of(forms[1:5], 1))
    h.service.flush()
    with pytest.raises(Exception, match=r"unacknowledged|failed"):
        h.service.flush()  # sealed up to 5, published up to 1
    h.producer.log.clear()
    service = h.restart()  # stopped while the topic is still down: the links are not confirmed
    h.producer.mode = "up"
    assert assign(service, [(TOPIC, 0)]) == {(TOPIC, 0): 1}
    service.process(batch_of(forms[1:3], 1))  # part of the window, then "killed" again
    service.flush()
    service.flush()
    store = opened(h)
    assert store.stored_offsets(TOPIC, [0]) == {0: 5}  # the sealed position did not go back
    assert store.stored_offsets(published_name(TOPIC), [0]) == {0: 3}
    store.close()
    service = h.restart()
    assert assign(service, [(TOPIC, 0)]) == {(TOPIC, 0): 3}
    service.process(batch_of(forms[3:], 3))
    service.flush()
    assert [p["index"] for p in h.published()] == [1, 2, 3, 4, 5]
    h.service.close()


def test_a_link_lost_while_a_checkpoint_is_published_is_never_recorded_as_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, monkeypatch, tree_head_interval_s="30")
    forms = run_forms("run-a", 3)
    h.service.on_assigned([(TOPIC, 0)])
    h.service.process(batch_of(forms))
    h.producer.mode = "down"
    h.service.flush()  # sealed, sent: lost
    with pytest.raises(Exception, match=r"failed"):
        h.service.flush()  # the loss is not forgotten: not recorded as published
    store = opened(h)
    try:
        assert store.stored_offsets(published_name(TOPIC), [0]) == {}
    finally:
        store.close()
    h.producer.mode = "up"
    assert h.service.sign_tree_heads() is not None  # the lost links are produced again first
    h.service.flush()
    assert [p["index"] for p in h.published()] == [0, 1, 2]  # once each, in order
    assert assign(h.restart(), [(TOPIC, 0)]) == {(TOPIC, 0): 3}
    h.service.close()


def test_a_first_flush_never_confirmed_replays_the_partition_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No published position at all: everything sealed in the partition is published again."""
    h = Harness(tmp_path, monkeypatch)
    forms = run_forms("run-a", 3)
    h.service.on_assigned([(TOPIC, 0)])
    h.producer.mode = "down"
    h.service.process(batch_of(forms[:2]))
    h.service.flush()
    with pytest.raises(Exception, match=r"unacknowledged|failed"):
        h.service.flush()
    h.producer.log.clear()
    service = h.restart()  # stopped while the topic is still down: the links are not confirmed
    h.producer.mode = "up"
    assert assign(service, [(TOPIC, 0)]) == {(TOPIC, 0): OFFSET_BEGINNING}
    service.process(batch_of(forms))
    service.flush()
    assert [p["index"] for p in h.published()] == [0, 1, 2]
    h.service.close()


def test_with_publishing_off_it_starts_at_the_sealed_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, monkeypatch, publish="false")
    h.service.on_assigned([(TOPIC, 0)])
    h.service.process(batch_of(run_forms("run-a", 3)))
    h.service.flush()
    assert h.producer.log == []
    assert assign(h.restart(), [(TOPIC, 0)]) == {(TOPIC, 0): 3}
    h.service.close()


def test_a_lost_partition_takes_its_unflushed_links_and_heads_along(harness: Harness) -> None:
    a = run_forms("run-a", 3)
    b = run_forms("run-b", 3)
    service = harness.service
    service.on_assigned([(TOPIC, 0), (TOPIC, 1)])
    service.process(batch_of(a[:1], 0, partition=0) + batch_of(b[:1], 0, partition=1))
    service.flush()
    service.process(batch_of(a[1:], 1, partition=0) + batch_of(b[1:], 1, partition=1))
    service.on_revoked([(TOPIC, 1)])  # lost: no flush happened for it
    service.flush()
    store = opened(harness)
    try:
        assert len(store.load_chain("t1", "run-a")) == 3
        assert len(store.load_chain("t1", "run-b")) == 1
        assert store.stored_offsets(TOPIC, [0, 1]) == {0: 3, 1: 1}
    finally:
        store.close()
    # whoever gets partition 1 next starts from the store and continues the chain
    other = harness.restart()
    assert assign(other, [(TOPIC, 1)]) == {(TOPIC, 1): 1}
    other.process(batch_of(b[1:], 1, partition=1))
    other.flush()
    store = opened(harness)
    try:
        assert [link.event for link in store.load_chain("t1", "run-b")] == b
    finally:
        store.close()


def test_a_clean_revoke_records_what_was_published(harness: Harness) -> None:
    service = harness.service
    service.on_assigned([(TOPIC, 0)])
    service.process(batch_of(run_forms("run-a", 3)))
    service.flush()  # sent, confirmation pending
    service.on_revoked([(TOPIC, 0)])
    store = opened(harness)
    try:
        assert store.stored_offsets(published_name(TOPIC), [0]) == {0: 3}
    finally:
        store.close()
    assert assign(harness.restart(), [(TOPIC, 0)]) == {(TOPIC, 0): 3}  # nothing re-sent


def test_a_chain_extended_behind_its_back_stops_the_service(harness: Harness) -> None:
    forms = run_forms("run-a", 3)
    service = harness.service
    service.on_assigned([(TOPIC, 0)])
    service.process(batch_of(forms[:1]))
    service.flush()
    rogue = opened(harness)  # another writer extends the head this member caches
    head = rogue.head("t1", "run-a")
    assert head is not None
    rogue.append_batch([seal(head.length, head.hash, run_forms("run-a", 1, start=99)[0])], {})
    rogue.close()
    service.process(batch_of(forms[1:], 1))
    with pytest.raises(ChainConflict):
        service.flush()
    # a restart re-reads the head from the store and goes on from there
    again = harness.restart()
    again.on_assigned([(TOPIC, 0)])
    again.process(batch_of(forms[1:], 1))
    again.flush()
    store = opened(harness)
    try:
        assert len(store.load_chain("t1", "run-a")) == 4
        assert verify_stored(store, "t1", "run-a").valid
    finally:
        store.close()


def test_heads_beyond_the_bound_are_reloaded_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, monkeypatch, max_cached_runs="2")
    runs = [run_forms(f"run-{i}", 4) for i in range(5)]
    h.service.on_assigned([(TOPIC, 0)])
    offset = 0
    for seq in range(4):
        h.service.process(batch_of([r[seq] for r in runs], offset))
        offset += len(runs)
        h.service.flush()
        assert len(h.service.heads) <= 2
    store = opened(h)
    try:
        for i, r in enumerate(runs):
            assert [link.event for link in store.load_chain("t1", f"run-{i}")] == r
    finally:
        store.close()
    h.service.close()


# --- tree heads -----------------------------------------------------------------------------
def test_periodic_checkpoints_sign_the_stored_heads_when_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [time.time()]
    monkeypatch.setattr(service_module.time, "time", lambda: clock[0])
    h = Harness(tmp_path, monkeypatch, tree_head_interval_s="30")
    service = h.service
    service.on_assigned([(TOPIC, 0)])
    service.process(batch_of(interleave(run_forms("run-a", 3), run_forms("run-b", 2, tenant="t2"))))
    service.tick(0)  # nothing flushed yet: the empty tree is signed
    service.flush()
    clock[0] += 10
    service.tick(0)  # not due
    store = opened(h)
    assert store.latest_tree_head() is not None and store.latest_tree_head().tree_head.size == 0
    clock[0] += 25
    service.tick(0)
    latest = store.latest_tree_head()
    assert latest is not None and latest.tree_head.size == 2
    assert store.committed_heads(latest.tree_head_id) == store.heads()
    # the transparency log too: every link a leaf, its tree head and tiles written
    logged = store.latest_log_checkpoint()
    assert logged is not None and logged.tree_head.size == 5
    tiles = file_path(AuditSettings.load(h.options).resolved_tiles_url(h.settings.state_dir))
    assert (tiles / "checkpoint").read_text() == logged.note
    assert (tiles / "tile" / "entries" / "000.p" / "5").exists()
    key = AuditSettings.load(h.options).resolved_key_path(h.settings.state_dir)
    assert key.exists() and Path(f"{key}.pub").exists()  # generated on first use
    assert verify_tree_head(latest.note, service.signer.verifier) == latest.tree_head  # type: ignore[union-attr]
    clock[0] += 31
    service.tick(0)  # due, but the heads did not change: nothing new to sign
    assert store.latest_tree_head() == latest
    store.close()
    h.producer.poll(0)
    tree_heads = [
        json.loads(m.value) for m in h.producer.log if dict(m.headers)[KIND_HEADER] == b"checkpoint"
    ]
    assert [c["size"] for c in tree_heads] == [0, 2]
    assert tree_heads[-1]["note"] == latest.note
    assert h.metric("runtrail_audit_tree_heads_total") == 2
    assert h.metric("runtrail_audit_tree_head_size") == 2
    assert h.metric("runtrail_audit_chains") == 2
    assert 31 <= h.metric("runtrail_audit_tree_head_age_seconds") < 120  # unchanged heads: it ages
    h.service.close()


def test_a_recent_checkpoint_by_someone_else_postpones_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path, monkeypatch, tree_head_interval_s="30")
    h.service.on_assigned([(TOPIC, 0)])
    h.service.process(batch_of(run_forms("run-a", 2)))
    h.service.flush()
    assert h.service.sign_tree_heads() is not None  # as `runtrail audit tree-head` would
    store = opened(h)
    first = store.latest_tree_head()
    h.service.process(batch_of(run_forms("run-a", 1, start=3), 2))
    h.service.flush()
    h.service.tick(0)  # the last one is seconds old: not due
    assert store.latest_tree_head() == first
    store.close()
    h.service.close()


def test_the_old_interval_name_is_still_read_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert AuditSettings.load({"checkpoint_interval_s": "7"}).tree_head_interval_s == 7
    assert (
        "checkpoint_interval_s (RUNTRAIL_AUDIT_CHECKPOINT_INTERVAL_S) is deprecated" in caplog.text
    )
    monkeypatch.setenv("RUNTRAIL_AUDIT_CHECKPOINT_INTERVAL_S", "9")
    assert AuditSettings.load({}).tree_head_interval_s == 9
    monkeypatch.setenv("RUNTRAIL_AUDIT_TREE_HEAD_INTERVAL_S", "11")
    assert AuditSettings.load({}).tree_head_interval_s == 11  # the new name wins


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown audit option"):
        AuditSettings.load({"stor_url": "x"})
    loaded = AuditSettings.load({"store_url": "postgresql://h/db", "tree_head_interval_s": "5"})
    assert loaded.store_url == "postgresql://h/db" and loaded.tree_head_interval_s == 5
    defaults = AuditSettings.load({})
    assert defaults.resolved_store_url(Path("/var/rt")) == sqlite_url("/var/rt/audit.db")
    assert defaults.resolved_key_path(Path("/var/rt")) == Path("/var/rt/audit/checkpoint.key")
