"""The link store contract, run against SQLite and a real PostgreSQL alike.

Every test takes a ``backend``: the store under test plus a raw connection that goes around it
(as someone with database access would), so the tamper table is played on real rows. The
PostgreSQL-only tests at the end cover what a shared server adds: triggers that also refuse
TRUNCATE, and writers in other connections racing for one head.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
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
    prove_head,
    seal,
    sign_tree_head,
    tree_head_for,
    verify_against_tree_head,
    verify_stored,
    verify_tree_head,
)
from runtrail.audit.store_postgres import PostgresLinkStore, run_lock_key
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import redact_url, sqlite_url

TOPIC = "runtrail.events"
BACKENDS = ["sqlite", "postgresql"]


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


@dataclass
class Backend:
    """A store URL, the store opened on it, and raw SQL access around the store."""

    kind: str
    url: str
    store: LinkStore
    _raw: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
    refused: tuple[type[Exception], ...]
    _drop_guards: Callable[[], None]

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run SQL written with ``%s`` placeholders on either database."""
        return self._raw(statement, params)

    def drop_guards(self) -> None:
        """Disable the append-only triggers, as an attacker with DDL rights could."""
        self._drop_guards()

    def reopen(self) -> LinkStore:
        return open_store(AUDIT_LINKS, self.url)


def open_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    """A fresh, empty store of ``kind`` with raw access; closed at the end of the test."""
    if kind == "sqlite":
        db = tmp_path / "audit" / "links.db"
        url = sqlite_url(db)
        store = open_store(AUDIT_LINKS, url)
        conn = sqlite3.connect(db, isolation_level=None)
        request.addfinalizer(conn.close)

        def raw_sqlite(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(statement.replace("%s", "?"), params)]

        def drop_sqlite() -> None:
            for name in ("audit_links_no_update", "audit_links_no_delete"):
                conn.execute(f"DROP TRIGGER {name}")

        backend = Backend(kind, url, store, raw_sqlite, (sqlite3.DatabaseError,), drop_sqlite)
    else:
        url = request.getfixturevalue("postgres_url")
        store = open_store(AUDIT_LINKS, url)
        pg = psycopg.connect(url, autocommit=True)
        request.addfinalizer(pg.close)

        def raw_pg(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            cursor = pg.execute(statement, params)  # type: ignore[arg-type]
            return list(cursor.fetchall()) if cursor.description else []

        def drop_pg() -> None:
            pg.execute("ALTER TABLE audit_links DISABLE TRIGGER USER")

        backend = Backend(kind, url, store, raw_pg, (psycopg.Error,), drop_pg)
    request.addfinalizer(store.close)
    return backend


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return open_backend(str(request.param), tmp_path, request)


@pytest.fixture
def store(backend: Backend) -> LinkStore:
    return backend.store


def filled(store: LinkStore, n: int = 6) -> list[Link]:
    links = links_for([event(seq) for seq in range(1, n + 1)])
    store.append_batch(links, {TopicPartition(TOPIC, 0): n})
    return links


# --- writing ---------------------------------------------------------------------------------
def test_batch_round_trip_heads_and_offsets(store: LinkStore) -> None:
    links = filled(store)
    assert store.load_chain("acme", "run-1") == links
    assert store.head("acme", "run-1") == RunHead("acme", "run-1", 6, links[-1].hash)
    assert store.head("acme", "nope") is None
    assert store.stored_offsets(TOPIC, [0, 1]) == {0: 6}
    assert store.find_event("acme", "evt-run-1-3") == links[2]
    assert store.find_event("globex", "evt-run-1-3") is None
    assert verify_stored(store, "acme", "run-1").valid


def test_batch_lookups_by_event_id_and_by_run(store: LinkStore) -> None:
    links = filled(store)
    store.append_batch(links_for([event(1, run="run-2")]), {})
    wanted = ["evt-run-1-2", "evt-run-1-5", "evt-run-2-1", "evt-absent", "evt-run-1-2"]
    found = store.find_events("acme", wanted)
    assert found == {
        "evt-run-1-2": links[1],
        "evt-run-1-5": links[4],
        "evt-run-2-1": store.load_chain("acme", "run-2")[0],
    }
    assert store.find_events("globex", wanted) == {}
    assert store.find_events("acme", []) == {}
    many = [f"evt-run-1-{seq}" for seq in range(1, 1200)]  # beyond one IN-list chunk
    assert set(store.find_events("acme", many)) == {f"evt-run-1-{s}" for s in range(1, 7)}
    heads = store.heads_of([("acme", "run-1"), ("acme", "run-2"), ("acme", "nope")])
    assert heads == {
        ("acme", "run-1"): RunHead("acme", "run-1", 6, links[-1].hash),
        ("acme", "run-2"): store.head("acme", "run-2"),
    }
    assert store.heads_of([]) == {}
    # one link by its index: the explorer's first and last event of a run
    assert store.link_at("acme", "run-1", 0) == links[0]
    assert store.link_at("acme", "run-1", 5) == links[-1]
    assert store.link_at("acme", "run-1", 6) is None
    assert store.link_at("globex", "run-1", 0) is None
    # summaries: the envelope fields of every link, in order, read by the database
    summaries = store.summaries("acme", "run-1")
    assert [(x.index, x.event_id, x.event_type, x.sequence) for x in summaries] == [
        (link.index, link.event["eventId"], link.event["type"], int(link.event["sequence"]))
        for link in links
    ]
    assert [x.occurred_at for x in summaries] == [link.event.get("occurredAt") for link in links]
    assert [(x.actor_kind, x.actor_id) for x in summaries] == [
        (link.event["actor"]["kind"], link.event["actor"]["id"]) for link in links
    ]
    assert store.summaries("globex", "run-1") == []


def test_stored_event_is_the_hashed_text(backend: Backend) -> None:
    import hashlib

    filled(backend.store, 2)
    for prev, hash_, text in backend.sql("SELECT prev_hash, hash, event FROM audit_links"):
        assert hashlib.sha256(f"{prev}|{text}".encode()).hexdigest() == hash_


def test_batches_continue_the_chain_and_advance_offsets(store: LinkStore) -> None:
    first = links_for([event(1), event(2)])
    store.append_batch(first, {TopicPartition(TOPIC, 0): 10, TopicPartition(TOPIC, 3): 4})
    second = links_for([event(3)], store.head("acme", "run-1"))
    store.append_batch(second, {TopicPartition(TOPIC, 0): 11})
    assert store.load_chain("acme", "run-1") == first + second
    assert store.stored_offsets(TOPIC, range(6)) == {0: 11, 3: 4}
    assert store.stored_offsets("other.topic", [0]) == {}


def test_offsets_alone(store: LinkStore) -> None:
    store.append_batch([], {TopicPartition(TOPIC, 2): 42})
    assert store.stored_offsets(TOPIC, [2]) == {2: 42}


def test_a_redelivered_event_is_not_sealed_twice(store: LinkStore) -> None:
    filled(store, 3)
    again = links_for([event(2)], store.head("acme", "run-1"))  # same eventId, as link 3
    with pytest.raises(ChainConflict):
        store.append_batch(again, {TopicPartition(TOPIC, 0): 99})
    assert len(store.load_chain("acme", "run-1")) == 3
    assert store.stored_offsets(TOPIC, [0]) == {0: 3}  # the offset did not move either


def test_the_same_event_id_in_another_tenant_is_another_event(store: LinkStore) -> None:
    filled(store, 2)
    store.append_batch(links_for([event(1, tenant="globex")]), {})
    assert len(store.load_chain("globex", "run-1")) == 1
    assert len(store.load_chain("acme", "run-1")) == 2


def test_a_retried_batch_is_harmless(store: LinkStore) -> None:
    links = filled(store, 3)
    more = links_for([event(4)], store.head("acme", "run-1"))
    store.append_batch([*links, *more], {TopicPartition(TOPIC, 0): 4})
    assert store.load_chain("acme", "run-1") == [*links, *more]
    assert store.stored_offsets(TOPIC, [0]) == {0: 4}


@pytest.mark.parametrize("fault", ["index", "prev_hash", "hash", "other_event"])
def test_a_batch_that_does_not_extend_the_head_is_refused_whole(
    store: LinkStore, fault: str
) -> None:
    filled(store, 2)
    good = links_for([event(3), event(4)], store.head("acme", "run-1"))
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


def test_a_fork_from_genesis_is_refused(store: LinkStore) -> None:
    filled(store, 2)
    with pytest.raises(ChainConflict):
        store.append_batch(links_for([event(7)]), {})


def test_links_are_append_only(backend: Backend) -> None:
    filled(backend.store, 3)
    with pytest.raises(backend.refused, match="append-only"):
        backend.sql("UPDATE audit_links SET event = '{}' WHERE idx = 1")
    with pytest.raises(backend.refused, match="append-only"):
        backend.sql("DELETE FROM audit_links WHERE idx = 2")
    assert verify_stored(backend.store, "acme", "run-1").valid


def test_survives_reopening(backend: Backend) -> None:
    links = filled(backend.store, 4)
    backend.store.close()
    again = backend.reopen()
    try:
        assert again.load_chain("acme", "run-1") == links
        assert again.stored_offsets(TOPIC, [0]) == {0: 4}
    finally:
        again.close()


def test_interleaved_tenants_and_runs_are_independent_chains(store: LinkStore) -> None:
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
def test_modified_payload(backend: Backend) -> None:
    filled(backend.store)
    backend.drop_guards()
    text = backend.sql("SELECT event FROM audit_links WHERE idx = 3")[0][0]
    backend.sql(
        "UPDATE audit_links SET event = %s WHERE idx = 3", text.replace('"rows":4', '"rows":5')
    )
    assert verify_stored(backend.store, "acme", "run-1").to_json() == {
        "valid": False,
        "length": 6,
        "firstBrokenIndex": 3,
        "reason": "hash mismatch",
    }


def test_deleted_middle_link(backend: Backend) -> None:
    filled(backend.store)
    backend.drop_guards()
    backend.sql("DELETE FROM audit_links WHERE idx = 2")
    result = verify_stored(backend.store, "acme", "run-1")
    assert (result.valid, result.first_broken_index, result.reason) == (
        False,
        2,  # a position, not the label (3) of the row after the gap
        "prevHash mismatch",
    )


def test_swapped_pair(backend: Backend) -> None:
    filled(backend.store)
    backend.drop_guards()
    backend.sql("UPDATE audit_links SET idx = 1000 WHERE idx = 1")
    backend.sql("UPDATE audit_links SET idx = 1 WHERE idx = 2")
    backend.sql("UPDATE audit_links SET idx = 2 WHERE idx = 1000")
    result = verify_stored(backend.store, "acme", "run-1")
    assert (result.valid, result.first_broken_index, result.reason) == (
        False,
        1,
        "prevHash mismatch",
    )


def test_modified_stored_hash(backend: Backend) -> None:
    filled(backend.store)
    backend.drop_guards()
    backend.sql("UPDATE audit_links SET hash = %s WHERE idx = 4", "0" * 64)
    result = verify_stored(backend.store, "acme", "run-1")
    assert (result.first_broken_index, result.reason) == (4, "hash mismatch")


def test_unreadable_stored_event(backend: Backend) -> None:
    filled(backend.store)
    backend.drop_guards()
    backend.sql("UPDATE audit_links SET event = %s WHERE idx = 1", '{"broken')
    with pytest.raises(MalformedLink):
        backend.store.load_chain("acme", "run-1")
    with pytest.raises(MalformedLink):
        backend.store.summaries("acme", "run-1")
    result = verify_stored(backend.store, "acme", "run-1")
    assert (result.valid, result.first_broken_index, result.reason) == (False, 1, "malformed link")


# --- tree heads against the store -----------------------------------------------------------
@pytest.fixture
def signer() -> NoteSigner:
    return NoteSigner("audit.example/store-test", Ed25519PrivateKey.generate())


def checkpoint_now(store: LinkStore, signer: NoteSigner) -> int:
    heads = store.heads()
    note = sign_tree_head(heads, signer, signer.name)
    return store.save_tree_head(note, tree_head_for(heads, signer.name), heads).tree_head_id


def test_checkpoints_are_kept_with_their_heads(backend: Backend, signer: NoteSigner) -> None:
    store = backend.store
    assert store.latest_tree_head() is None
    filled(store, 3)
    store.append_batch(links_for([event(1, "globex")]), {})
    first = checkpoint_now(store, signer)
    store.append_batch(links_for([event(4)], store.head("acme", "run-1")), {})
    second = checkpoint_now(store, signer)
    latest = store.latest_tree_head()
    assert latest is not None and latest.tree_head_id == second > first
    assert verify_tree_head(latest.note, signer.verifier) == latest.tree_head
    assert [h.length for h in store.committed_heads(first)] == [3, 1]
    assert [h.length for h in store.committed_heads(second)] == [4, 1]
    first_body = tree_head_for(store.committed_heads(first), signer.name)
    found = store.find_tree_head(first_body)
    assert found is not None and found.tree_head_id == first
    assert store.find_tree_head(tree_head_for([], "elsewhere")) is None
    with pytest.raises(backend.refused, match="append-only"):
        backend.sql("DELETE FROM audit_checkpoints")


def test_an_empty_checkpoint(store: LinkStore, signer: NoteSigner) -> None:
    tree_head_id = checkpoint_now(store, signer)
    assert store.committed_heads(tree_head_id) == []
    latest = store.latest_tree_head()
    assert latest is not None and latest.tree_head.size == 0


def test_truncated_tail_is_detected_against_a_checkpoint(
    backend: Backend, signer: NoteSigner
) -> None:
    store = backend.store
    filled(store)
    tree_head_id = checkpoint_now(store, signer)
    stored = store.latest_tree_head()
    assert stored is not None
    trusted = verify_tree_head(stored.note, signer.verifier)  # kept by the auditor
    proof = prove_head(store.committed_heads(tree_head_id), "acme", "run-1")

    backend.drop_guards()
    backend.sql("DELETE FROM audit_links WHERE idx >= 4")
    assert verify_stored(store, "acme", "run-1").valid  # the cut chain is fine on its own
    result = verify_against_tree_head(store.load_chain("acme", "run-1"), trusted, proof)
    assert (result.valid, result.first_broken_index, result.reason) == (False, 4, "truncated")


def test_resealed_rewrite_is_detected_against_a_checkpoint(
    backend: Backend, signer: NoteSigner
) -> None:
    store = backend.store
    filled(store)
    tree_head_id = checkpoint_now(store, signer)
    stored = store.latest_tree_head()
    assert stored is not None
    trusted = verify_tree_head(stored.note, signer.verifier)
    proof = prove_head(store.committed_heads(tree_head_id), "acme", "run-1")

    backend.drop_guards()
    backend.sql("DELETE FROM audit_links")
    rewritten = [event(seq, note="doctored") if seq == 2 else event(seq) for seq in range(1, 7)]
    store.append_batch(links_for(rewritten), {})
    assert verify_stored(store, "acme", "run-1").valid  # every hash is consistent again
    result = verify_against_tree_head(store.load_chain("acme", "run-1"), trusted, proof)
    assert (result.valid, result.first_broken_index, result.reason) == (False, 5, "rewritten")


# --- concurrent writers ----------------------------------------------------------------------
def test_two_writers_cannot_both_extend_one_head(backend: Backend) -> None:
    filled(backend.store, 2)
    head = backend.store.head("acme", "run-1")
    writers = [backend.reopen() for _ in range(2)]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def write(i: int) -> None:
        mine = links_for([event(100 + i)], head)  # both on the same head, different events
        barrier.wait()
        try:
            writers[i].append_batch(mine, {TopicPartition(TOPIC, 0): 100 + i})
            outcomes.append("ok")
        except ChainConflict:
            outcomes.append("refused")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for w in writers:
        w.close()
    assert sorted(outcomes) == ["ok", "refused"]
    chain = backend.store.load_chain("acme", "run-1")
    assert len(chain) == 3 and verify_stored(backend.store, "acme", "run-1").valid


def test_racing_writers_build_one_valid_chain_per_run(backend: Backend) -> None:
    """Four writers, each in its own connection, append to three shared runs at once,
    re-reading the head after each refusal: nothing is lost, nothing forks."""
    runs = ["shared-a", "shared-b", "shared-c"]
    per_writer = 15
    errors: list[BaseException] = []

    def write(i: int) -> None:
        store = backend.reopen()
        try:
            for n in range(per_writer):
                for run in runs if i % 2 == 0 else reversed(runs):
                    value = event(1000 * i + n, run=run)
                    while True:
                        link = links_for([value], store.head("acme", run))[0]
                        try:
                            store.append_batch([link], {})
                            break
                        except ChainConflict:
                            continue
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    for run in runs:
        chain = backend.store.load_chain("acme", run)
        assert len(chain) == 4 * per_writer
        assert len({link.event_id for link in chain}) == 4 * per_writer
        assert verify_stored(backend.store, "acme", run).valid
    # the log numbered every link once, in commit order: no gap, no duplicate, and each
    # run's links in chain order
    size = backend.store.log_size()
    assert size == len(runs) * 4 * per_writer
    leaves = backend.sql("SELECT leaf_index, run_id, idx, hash FROM audit_log ORDER BY leaf_index")
    assert [row[0] for row in leaves] == list(range(size))
    for run in runs:
        chain = backend.store.load_chain("acme", run)
        assert [(r[2], r[3]) for r in leaves if r[1] == run] == [(x.index, x.hash) for x in chain]


# --- the transparency log ------------------------------------------------------------------
def test_each_stored_link_is_the_next_leaf_of_the_log(backend: Backend) -> None:
    store = backend.store
    assert store.log_size() == 0 and store.log_entries(0, 10) == []
    first = filled(store, 3)
    other = links_for([event(1, run="run-2"), event(2, run="run-2")])
    store.append_batch([other[0], *links_for([event(4)], store.head("acme", "run-1"))], {})
    store.append_batch([*first, other[1]], {})  # a retried batch: only run-2's link is new
    assert store.log_size() == 6
    entries = store.log_entries(0, 6)
    chain = store.load_chain("acme", "run-1")
    assert entries == [bytes.fromhex(h) for h in [*[x.hash for x in chain[:3]], other[0].hash,
                                                    chain[3].hash, other[1].hash]]  # fmt: skip
    assert store.log_entries(2, 4) == entries[2:4]
    assert store.log_index("acme", "run-1", 3) == 4
    assert store.log_index("acme", "run-2", 1) == 5
    assert store.log_index("acme", "run-2", 2) is None
    with pytest.raises(backend.refused):
        backend.sql("UPDATE audit_log SET hash = %s WHERE leaf_index = 0", "00" * 32)
    with pytest.raises(backend.refused):
        backend.sql("DELETE FROM audit_log WHERE leaf_index = 5")
    assert store.log_size() == 6


def test_log_checkpoints_are_kept_largest_first(backend: Backend, signer: NoteSigner) -> None:
    from runtrail.audit.note import sign_note
    from runtrail.audit.tree_head import TreeHead

    store = backend.store
    assert store.latest_log_checkpoint() is None
    small, large = TreeHead("o", 1, b"\x01" * 32), TreeHead("o", 2, b"\x02" * 32)
    saved_large = store.save_log_checkpoint(sign_note(large.body(), signer), large)
    store.save_log_checkpoint(sign_note(small.body(), signer), small)  # saved late
    latest = store.latest_log_checkpoint()
    assert latest is not None and latest.tree_head == large
    assert latest.tree_head_id == saved_large.tree_head_id
    found = store.log_checkpoint_of_size(1)
    assert found is not None and found.tree_head == small
    assert store.log_checkpoint_of_size(3) is None
    # witnesses' cosignatures, kept once each
    assert store.cosignatures(saved_large.tree_head_id) == {}
    store.save_cosignatures(saved_large.tree_head_id, {"w1": "— w1 AAAA", "w2": "— w2 BBBB"})
    store.save_cosignatures(saved_large.tree_head_id, {"w1": "— w1 AAAA"})
    assert store.cosignatures(saved_large.tree_head_id) == {"w1": "— w1 AAAA", "w2": "— w2 BBBB"}


def test_existing_links_become_leaves_in_run_order(tmp_path: Path) -> None:
    """A store written before the log: its links are numbered once, by (tenant, run, index)."""
    from runtrail.audit.store_sql import SQLITE_SCHEMA

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for statement in SQLITE_SCHEMA:
        conn.execute(statement)
    rows = [(link, "run-b") for link in links_for([event(s, run="run-b") for s in (1, 2)])]
    rows += [(link, "run-a") for link in links_for([event(s, run="run-a") for s in (1, 2)])]
    for link, run in rows:
        conn.execute(
            "INSERT INTO audit_links VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("acme", run, link.index, link.event_id, link.prev_hash, link.hash,
             link.canonical().decode()),
        )  # fmt: skip
    conn.close()
    store = open_store(AUDIT_LINKS, sqlite_url(db))
    try:
        assert store.log_size() == 4
        order = [(store.log_index("acme", r, i)) for r in ("run-a", "run-b") for i in (0, 1)]
        assert order == [0, 1, 2, 3]
        new = links_for([event(3, run="run-a")], store.head("acme", "run-a"))
        store.append_batch(new, {})
        assert store.log_index("acme", "run-a", 2) == 4
    finally:
        store.close()


# --- PostgreSQL specifics --------------------------------------------------------------------
@pytest.fixture
def pg(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    return open_backend("postgresql", tmp_path, request)


def test_postgres_refuses_truncate_and_checkpoint_edits(pg: Backend) -> None:
    filled(pg.store, 2)
    heads = pg.store.heads()
    signer = NoteSigner("k", Ed25519PrivateKey.generate())
    pg.store.save_tree_head(sign_tree_head(heads, signer, "o"), tree_head_for(heads, "o"), heads)
    for statement in (
        "TRUNCATE audit_links",
        "TRUNCATE audit_checkpoints CASCADE",
        "UPDATE audit_checkpoints SET note = 'x'",
        "DELETE FROM audit_checkpoint_heads",
        "UPDATE audit_checkpoint_heads SET length = 1",
    ):
        with pytest.raises(psycopg.Error, match="append-only"):
            pg.sql(statement)
    assert len(pg.store.load_chain("acme", "run-1")) == 2


def test_a_writer_waits_for_the_lock_on_its_run(pg: Backend) -> None:
    """While one transaction holds a run's advisory lock, a writer to that run waits, then is
    refused because the head moved; a writer to another run is not held up."""
    filled(pg.store, 1)
    head = pg.store.head("acme", "run-1")
    holder = psycopg.connect(pg.url)
    try:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (run_lock_key("acme", "run-1"),))
        other = pg.reopen()
        other.append_batch(links_for([event(1, run="run-2")]), {})  # not blocked
        done = threading.Event()
        outcome: list[str] = []

        def write() -> None:
            try:
                other.append_batch(links_for([event(50)], head), {})
                outcome.append("ok")
            except ChainConflict:
                outcome.append("refused")
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        assert not done.wait(0.5), "the writer did not wait for the lock"
        rival = links_for([event(2)], head)[0]
        holder.execute(
            "INSERT INTO audit_links (tenant_id, run_id, idx, event_id, prev_hash, hash, event) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            ("acme", "run-1", 1, rival.event_id, rival.prev_hash, rival.hash, "{}"),
        )
        holder.commit()
        assert done.wait(10)
        thread.join(10)
        other.close()
        assert outcome == ["refused"]
    finally:
        holder.close()


def test_the_audit_store_opens_by_url(tmp_path: Path, postgres_url: str) -> None:
    sqlite_store = open_store(AUDIT_LINKS, sqlite_url(tmp_path / "x.db"))
    pg_store = open_store(AUDIT_LINKS, postgres_url)
    try:
        assert type(sqlite_store).__name__ == "SqliteLinkStore"
        assert isinstance(pg_store, PostgresLinkStore)
    finally:
        sqlite_store.close()
        pg_store.close()
    with pytest.raises(ValueError, match="unsupported"):
        open_store(AUDIT_LINKS, "mysql://u:secret@h/db")
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
