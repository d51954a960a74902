"""The SQLite link store: atomic batches with offsets, no double sealing, tampering found."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtrail.audit import (
    GENESIS_HASH,
    ChainConflict,
    Link,
    LinkStore,
    MalformedLink,
    NoteSigner,
    RunHead,
    TopicPartition,
    checkpoint_for,
    prove_head,
    seal,
    sign_checkpoint,
    verify_against_checkpoint,
    verify_checkpoint,
    verify_stored,
)
from runtrail.audit.store_sqlite import SqliteLinkStore, path_from_url

TOPIC = "runtrail.events"


def event(seq: int, tenant: str = "acme", run: str = "run-1", **data: Any) -> dict[str, Any]:
    return {
        "eventId": f"evt-{run}-{seq}",
        "runId": run,
        "tenantId": tenant,
        "sequence": str(seq),
        "type": "TOOL_RESULT",
        "schemaVersion": 1,
        "occurredAt": "2024-05-01T12:00:00Z",
        "actor": {"kind": "agent", "id": "a"},
        "correlationId": "c",
        "data": {"callId": f"call-{seq}", "output": {"rows": seq, "ok": True}, **data},
    }


def links_for(events: list[dict[str, Any]], start: RunHead | None = None) -> list[Link]:
    """Seal events one after another from ``start`` (genesis by default), as the service does."""
    length, last = (0, GENESIS_HASH) if start is None else (start.length, start.hash)
    out = []
    for value in events:
        link = seal(length, last, value)
        out.append(link)
        length, last = length + 1, link.hash
    return out


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "audit" / "links.db"


@pytest.fixture
def store(db: Path) -> Iterator[SqliteLinkStore]:
    s = SqliteLinkStore(db)
    yield s
    s.close()


def filled(store: SqliteLinkStore, n: int = 6) -> list[Link]:
    links = links_for([event(seq) for seq in range(1, n + 1)])
    store.append_batch(links, {TopicPartition(TOPIC, 0): n})
    return links


@pytest.fixture
def raw(db: Path, store: SqliteLinkStore) -> Iterator[sqlite3.Connection]:
    """A connection that goes around the store, as someone with file access would."""
    conn = sqlite3.connect(db, isolation_level=None)
    yield conn
    conn.close()


def drop_guards(conn: sqlite3.Connection) -> None:
    for name in ("audit_links_no_update", "audit_links_no_delete"):
        conn.execute(f"DROP TRIGGER {name}")


def test_is_a_link_store(store: SqliteLinkStore) -> None:
    typed: LinkStore = store
    assert typed.heads() == []


# --- writing ---------------------------------------------------------------------------------
def test_batch_round_trip_heads_and_offsets(store: SqliteLinkStore) -> None:
    links = filled(store)
    assert store.load_chain("acme", "run-1") == links
    assert store.head("acme", "run-1") == RunHead("acme", "run-1", 6, links[-1].hash)
    assert store.head("acme", "nope") is None
    assert store.stored_offsets(TOPIC, [0, 1]) == {0: 6}
    assert store.find_event("acme", "evt-run-1-3") == links[2]
    assert store.find_event("globex", "evt-run-1-3") is None
    assert verify_stored(store, "acme", "run-1").valid


def test_stored_event_is_the_hashed_text(store: SqliteLinkStore, raw: sqlite3.Connection) -> None:
    filled(store, 2)
    for prev, hash_, text in raw.execute("SELECT prev_hash, hash, event FROM audit_links"):
        assert hashlib.sha256(f"{prev}|{text}".encode()).hexdigest() == hash_


def test_batches_continue_the_chain_and_advance_offsets(store: SqliteLinkStore) -> None:
    first = links_for([event(1), event(2)])
    store.append_batch(first, {TopicPartition(TOPIC, 0): 10, TopicPartition(TOPIC, 3): 4})
    head = store.head("acme", "run-1")
    second = links_for([event(3)], head)
    store.append_batch(second, {TopicPartition(TOPIC, 0): 11})
    assert store.load_chain("acme", "run-1") == first + second
    assert store.stored_offsets(TOPIC, range(6)) == {0: 11, 3: 4}
    assert store.stored_offsets("other.topic", [0]) == {}


def test_offsets_alone(store: SqliteLinkStore) -> None:
    store.append_batch([], {TopicPartition(TOPIC, 2): 42})
    assert store.stored_offsets(TOPIC, [2]) == {2: 42}


def test_a_redelivered_event_is_not_sealed_twice(store: SqliteLinkStore) -> None:
    filled(store, 3)
    head = store.head("acme", "run-1")
    again = links_for([event(2)], head)  # the same eventId, as a new link 3
    with pytest.raises(ChainConflict):
        store.append_batch(again, {TopicPartition(TOPIC, 0): 99})
    assert len(store.load_chain("acme", "run-1")) == 3
    assert store.stored_offsets(TOPIC, [0]) == {0: 3}  # the offset did not move either
    assert store.find_event("acme", "evt-run-1-2") is not None  # what the service checks first


def test_the_same_event_id_in_another_tenant_is_another_event(store: SqliteLinkStore) -> None:
    filled(store, 2)
    store.append_batch(links_for([event(1, tenant="globex")]), {})
    assert len(store.load_chain("globex", "run-1")) == 1


def test_a_retried_batch_is_harmless(store: SqliteLinkStore) -> None:
    links = filled(store, 3)
    more = links_for([event(4)], store.head("acme", "run-1"))
    store.append_batch([*links, *more], {TopicPartition(TOPIC, 0): 4})
    assert store.load_chain("acme", "run-1") == [*links, *more]
    assert store.stored_offsets(TOPIC, [0]) == {0: 4}


@pytest.mark.parametrize("fault", ["index", "prev_hash", "hash", "other_event"])
def test_a_batch_that_does_not_extend_the_head_is_refused_whole(
    store: SqliteLinkStore, fault: str
) -> None:
    filled(store, 2)
    head = store.head("acme", "run-1")
    assert head is not None
    good = links_for([event(3), event(4)], head)
    bad = good[1]
    if fault == "index":
        bad = Link(5, bad.event, bad.prev_hash, bad.hash)
    elif fault == "prev_hash":
        bad = seal(bad.index, "ab" * 32, bad.event)  # self-consistent, but on another head
    elif fault == "hash":
        bad = Link(bad.index, bad.event, bad.prev_hash, "ab" * 32)
    else:
        bad = Link(bad.index, event(4, note="swapped in"), bad.prev_hash, bad.hash)
    with pytest.raises(ChainConflict):
        store.append_batch([good[0], bad], {TopicPartition(TOPIC, 0): 4})
    assert len(store.load_chain("acme", "run-1")) == 2  # good[0] was rolled back too
    assert store.stored_offsets(TOPIC, [0]) == {0: 2}


def test_a_fork_from_genesis_is_refused(store: SqliteLinkStore) -> None:
    filled(store, 2)
    with pytest.raises(ChainConflict):
        store.append_batch(links_for([event(7)]), {})


def test_links_are_append_only(store: SqliteLinkStore, raw: sqlite3.Connection) -> None:
    filled(store, 3)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("UPDATE audit_links SET event = '{}' WHERE idx = 1")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("DELETE FROM audit_links WHERE idx = 2")
    assert verify_stored(store, "acme", "run-1").valid


def test_survives_reopening(db: Path) -> None:
    first = SqliteLinkStore(db)
    links = filled(first, 4)
    first.close()
    again = SqliteLinkStore.from_url(f"sqlite://{db}")
    assert again.load_chain("acme", "run-1") == links
    assert again.stored_offsets(TOPIC, [0]) == {0: 4}
    again.close()


def test_url_paths() -> None:
    assert path_from_url("sqlite:///var/lib/runtrail/audit.db") == "/var/lib/runtrail/audit.db"
    assert path_from_url("sqlite:///:memory:") == ":memory:"
    for bad in ("postgresql://h/db", "sqlite://host/x.db", "sqlite:"):
        with pytest.raises(ValueError):
            path_from_url(bad)


def test_interleaved_tenants_and_runs_are_independent_chains(store: SqliteLinkStore) -> None:
    keys = [("acme", "r1"), ("globex", "r1"), ("acme", "r2")]
    heads: dict[tuple[str, str], RunHead | None] = dict.fromkeys(keys)
    offset = 0
    for seq in range(1, 6):
        batch = []
        for tenant, run in keys:
            link = links_for([event(seq, tenant, run)], heads[(tenant, run)])[0]
            heads[(tenant, run)] = RunHead(tenant, run, link.index + 1, link.hash)
            batch.append(link)
            offset += 1
        store.append_batch(batch, {TopicPartition(TOPIC, 0): offset})
    for tenant, run in keys:
        alone = links_for([event(seq, tenant, run) for seq in range(1, 6)])
        assert store.load_chain(tenant, run) == alone
        assert verify_stored(store, tenant, run).valid
    assert [(h.tenant_id, h.run_id, h.length) for h in store.heads()] == [
        ("acme", "r1", 5),
        ("acme", "r2", 5),
        ("globex", "r1", 5),
    ]


# --- the tamper table, against the store -----------------------------------------------------
def test_modified_payload(store: SqliteLinkStore, raw: sqlite3.Connection) -> None:
    filled(store)
    drop_guards(raw)
    text = raw.execute("SELECT event FROM audit_links WHERE idx = 3").fetchone()[0]
    raw.execute(
        "UPDATE audit_links SET event = ? WHERE idx = 3", (text.replace('"rows":4', '"rows":5'),)
    )
    result = verify_stored(store, "acme", "run-1")
    assert result.to_json() == {
        "valid": False,
        "length": 6,
        "firstBrokenIndex": 3,
        "reason": "hash mismatch",
    }


def test_deleted_middle_link(store: SqliteLinkStore, raw: sqlite3.Connection) -> None:
    filled(store)
    drop_guards(raw)
    raw.execute("DELETE FROM audit_links WHERE idx = 2")
    result = verify_stored(store, "acme", "run-1")
    assert (result.valid, result.first_broken_index, result.reason) == (
        False,
        3,
        "prevHash mismatch",
    )


def test_swapped_pair(store: SqliteLinkStore, raw: sqlite3.Connection) -> None:
    filled(store)
    drop_guards(raw)
    raw.execute("UPDATE audit_links SET idx = 1000 WHERE idx = 1")
    raw.execute("UPDATE audit_links SET idx = 1 WHERE idx = 2")
    raw.execute("UPDATE audit_links SET idx = 2 WHERE idx = 1000")
    result = verify_stored(store, "acme", "run-1")
    assert (result.valid, result.first_broken_index, result.reason) == (
        False,
        1,
        "prevHash mismatch",
    )


def test_modified_stored_hash(store: SqliteLinkStore, raw: sqlite3.Connection) -> None:
    filled(store)
    drop_guards(raw)
    raw.execute("UPDATE audit_links SET hash = ? WHERE idx = 4", ("0" * 64,))
    result = verify_stored(store, "acme", "run-1")
    assert (result.first_broken_index, result.reason) == (4, "hash mismatch")


def test_unreadable_stored_event(store: SqliteLinkStore, raw: sqlite3.Connection) -> None:
    filled(store)
    drop_guards(raw)
    raw.execute("UPDATE audit_links SET event = '{\"broken' WHERE idx = 1")
    with pytest.raises(MalformedLink):
        store.load_chain("acme", "run-1")
    result = verify_stored(store, "acme", "run-1")
    assert (result.valid, result.first_broken_index, result.reason) == (False, 1, "malformed link")


# --- checkpoints against the store -----------------------------------------------------------
@pytest.fixture
def signer() -> NoteSigner:
    return NoteSigner("audit.example/store-test", Ed25519PrivateKey.generate())


def checkpoint_now(store: SqliteLinkStore, signer: NoteSigner) -> int:
    heads = store.heads()
    note = sign_checkpoint(heads, signer, signer.name)
    return store.save_checkpoint(note, checkpoint_for(heads, signer.name), heads).checkpoint_id


def test_checkpoints_are_kept_with_their_heads(
    store: SqliteLinkStore, signer: NoteSigner, raw: sqlite3.Connection
) -> None:
    assert store.latest_checkpoint() is None
    filled(store, 3)
    store.append_batch(links_for([event(1, "globex")]), {})
    first = checkpoint_now(store, signer)
    store.append_batch(links_for([event(4)], store.head("acme", "run-1")), {})
    second = checkpoint_now(store, signer)
    latest = store.latest_checkpoint()
    assert latest is not None and latest.checkpoint_id == second > first
    assert verify_checkpoint(latest.note, signer.verifier) == latest.checkpoint
    assert [h.length for h in store.checkpoint_heads(first)] == [3, 1]
    assert [h.length for h in store.checkpoint_heads(second)] == [4, 1]
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("DELETE FROM audit_checkpoints")


def test_truncated_tail_in_the_store_is_detected_against_a_checkpoint(
    store: SqliteLinkStore, signer: NoteSigner, raw: sqlite3.Connection
) -> None:
    filled(store)
    checkpoint_id = checkpoint_now(store, signer)
    stored = store.latest_checkpoint()
    assert stored is not None
    trusted = verify_checkpoint(stored.note, signer.verifier)  # kept by the auditor
    proof = prove_head(store.checkpoint_heads(checkpoint_id), "acme", "run-1")

    drop_guards(raw)
    raw.execute("DELETE FROM audit_links WHERE idx >= 4")
    assert verify_stored(store, "acme", "run-1").valid  # the cut chain is fine on its own
    result = verify_against_checkpoint(store.load_chain("acme", "run-1"), trusted, proof)
    assert (result.valid, result.first_broken_index, result.reason) == (False, 4, "truncated")


def test_resealed_rewrite_in_the_store_is_detected_against_a_checkpoint(
    store: SqliteLinkStore, signer: NoteSigner, raw: sqlite3.Connection
) -> None:
    filled(store)
    checkpoint_id = checkpoint_now(store, signer)
    stored = store.latest_checkpoint()
    assert stored is not None
    trusted = verify_checkpoint(stored.note, signer.verifier)
    proof = prove_head(store.checkpoint_heads(checkpoint_id), "acme", "run-1")

    drop_guards(raw)
    raw.execute("DELETE FROM audit_links")
    rewritten = [event(seq, note="doctored") if seq == 2 else event(seq) for seq in range(1, 7)]
    store.append_batch(links_for(rewritten), {})
    assert verify_stored(store, "acme", "run-1").valid  # every hash is consistent again
    result = verify_against_checkpoint(store.load_chain("acme", "run-1"), trusted, proof)
    assert (result.valid, result.first_broken_index, result.reason) == (False, 5, "rewritten")
