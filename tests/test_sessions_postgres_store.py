"""The PostgreSQL store on a real server: concurrent saves leave the newest; refusals name the row."""

from __future__ import annotations

import random
import threading

import psycopg
import pytest

from runtrail.sessions import AgentSessionSnapshot, CorruptSnapshot
from runtrail.sessions.store_postgres import TABLE, PostgresSessionStore
from tests.sessions_support import built_snapshot

WRITERS = 4
REVISIONS = 40


def test_concurrent_saves_of_one_session_leave_the_newest(postgres_url: str) -> None:
    snapshots = [built_snapshot(n) for n in range(1, REVISIONS + 1)]
    rng = random.Random(6)
    order = snapshots[:]
    rng.shuffle(order)
    shares = [order[i::WRITERS] for i in range(WRITERS)]
    stores = [PostgresSessionStore(postgres_url) for _ in range(WRITERS)]
    start = threading.Barrier(WRITERS)
    outcomes: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def write(store: PostgresSessionStore, share: list[AgentSessionSnapshot]) -> None:
        try:
            start.wait(10)
            for snapshot in share:
                outcomes.append((snapshot.revision, store.save(snapshot)))
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=pair) for pair in zip(stores, shares, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    loaded = stores[0].load("t1", "s1")
    assert loaded is not None
    assert loaded.revision == REVISIONS and loaded.digest == snapshots[-1].digest
    assert (REVISIONS, True) in outcomes
    assert any(not saved for _, saved in outcomes)  # some older saves were refused
    for store in stores:
        store.close()


def test_a_corrupted_row_is_refused_with_an_error_naming_it(postgres_url: str) -> None:
    store = PostgresSessionStore(postgres_url)
    snapshot = built_snapshot(15)
    store.save(snapshot)
    text = snapshot.to_bytes().decode()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {TABLE} SET snapshot = %s WHERE tenant_id = 't1' AND session_id = 's1'",
            (text.replace('"message":"a1"', '"message":"A1"', 1),),
        )
    with pytest.raises(CorruptSnapshot, match="digest mismatch") as caught:
        store.load("t1", "s1")
    message = str(caught.value)
    assert f"{TABLE} row (tenant_id='t1', session_id='s1')" in message
    assert "127.0.0.1" in message

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"UPDATE {TABLE} SET snapshot = %s, revision = 99", (text,))
    with pytest.raises(CorruptSnapshot, match="columns say revision 99"):
        store.load("t1", "s1")
    assert not store.save(built_snapshot(16))  # the row claims 99 events: refused, not lost
    store.close()
