"""A store made by the previous release opens under the migrations with its rows and its
positions: the wave-1 tables are created here by the wave-1 DDL (``FIRST_SCHEMA``, frozen as
the first release ran it), filled by hand, then opened by today's adapters."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runtrail.audit import store_sql as audit_sql
from runtrail.audit.appending import rows_to_append
from runtrail.audit.errors import ChainConflict
from runtrail.audit.store import TopicPartition, verify_stored
from runtrail.persistence.kinds import AUDIT_LINKS, PROJECTIONS
from runtrail.persistence.migrations import TABLE as MIGRATIONS
from runtrail.persistence.migrations import StoreTooNew
from runtrail.persistence.registry import open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection import ProjectionBatch, StoreConflict
from runtrail.projection import store_sql as projection_sql
from tests.test_audit_store_contract import event, links_for

TOPIC = "runtrail.events"
Run = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


@pytest.fixture(params=["sqlite", "postgresql"])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, Run]]:
    """(dialect, url, run): ``run`` executes SQL on the database behind any store's back."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"

        def run_lite(statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
            with sqlite3.connect(path) as db:
                rows = db.execute(statement, tuple(params)).fetchall()
            db.close()
            return rows

        yield "sqlite", sqlite_url(path), run_lite
        return
    url = request.getfixturevalue("postgres_url")

    def run_pg(statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(statement, tuple(params) or None)
            return cur.fetchall() if cur.description is not None else []

    yield "postgresql", url, run_pg


def _recorded(run: Run) -> list[tuple[Any, ...]]:
    return run(f"SELECT component, version FROM {MIGRATIONS} ORDER BY component, version", ())


def _has_table(dialect: str, run: Run, table: str) -> bool:
    if dialect == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?"
    else:
        query = "SELECT tablename FROM pg_tables WHERE tablename = %s"
    return bool(run(query, (table,)))


def test_a_wave1_projection_store_keeps_its_rows_and_positions(
    old_store: tuple[str, str, Run],
) -> None:
    dialect, url, run = old_store
    for statement in projection_sql.FIRST_SCHEMA:
        run(statement, ())
    mark = "?" if dialect == "sqlite" else "%s"
    run(
        "INSERT INTO projections (tenant_id, run_id, status, version, projector_version, state, "
        f"halted, halt_reason) VALUES ({mark}, {mark}, NULL, 0, 1, NULL, TRUE, {mark})",
        ("acme", "run-1", "P001: cannot apply"),
    )
    for partition, offset in ((0, 42), (1, 7)):
        run(
            f"INSERT INTO consumer_offsets (topic, partition_id, next_offset) "
            f"VALUES ({mark}, {mark}, {mark})",
            (TOPIC, partition, offset),
        )

    store = open_store(PROJECTIONS, url)
    try:
        row = store.get("acme", "run-1")
        assert row is not None and row.halted and row.halt_reason == "P001: cannot apply"
        assert store.stored_offsets(TOPIC, [0, 1, 2]) == {0: 42, 1: 7}
        with pytest.raises(StoreConflict, match="refusing to move it back to 41"):
            store.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 41}))
        store.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 43}))
    finally:
        store.close()
    assert not _has_table(dialect, run, "consumer_offsets")
    assert _recorded(run) == [
        ("projection", 1),
        ("projection", 2),
        ("projection", 3),
        ("projection", 4),
        ("tracking", 1),
    ]
    again = open_store(PROJECTIONS, url)  # a second open applies nothing
    try:
        assert again.stored_offsets(TOPIC, [0, 1]) == {0: 43, 1: 7}
    finally:
        again.close()
    assert len(_recorded(run)) == 5


def test_a_wave1_audit_store_keeps_its_chains_and_positions(
    old_store: tuple[str, str, Run],
) -> None:
    dialect, url, run = old_store
    if dialect == "sqlite":
        for statement in audit_sql.SQLITE_SCHEMA:
            run(statement, ())
    else:
        run(audit_sql.POSTGRES_SCHEMA, ())
    mark = "?" if dialect == "sqlite" else "%s"
    links = links_for([event(seq) for seq in range(1, 5)])
    for row in rows_to_append(links, {}, lambda link: False):
        run(
            "INSERT INTO audit_links (tenant_id, run_id, idx, event_id, prev_hash, hash, event) "
            f"VALUES ({', '.join([mark] * 7)})",
            row,
        )
    for topic, offset in ((TOPIC, 4), (TOPIC + "#published", 3)):
        run(
            f"INSERT INTO audit_offsets (topic, partition, next_offset) VALUES ({mark}, 0, {mark})",
            (topic, offset),
        )

    store = open_store(AUDIT_LINKS, url)
    try:
        assert store.load_chain("acme", "run-1") == links
        assert verify_stored(store, "acme", "run-1").valid
        assert store.stored_offsets(TOPIC, [0]) == {0: 4}
        assert store.stored_offsets(TOPIC + "#published", [0]) == {0: 3}
        with pytest.raises(ChainConflict, match="refusing to move it back"):
            store.append_batch([], {TopicPartition(TOPIC, 0): 2})
        more = links_for([event(5)], store.head("acme", "run-1"))
        store.append_batch(more, {TopicPartition(TOPIC, 0): 5})
        assert len(store.load_chain("acme", "run-1")) == 5
        store.rewind_offsets({TopicPartition(TOPIC, 0): 1})  # the operator's explicit rewind
        assert store.stored_offsets(TOPIC, [0]) == {0: 1}
    finally:
        store.close()
    assert not _has_table(dialect, run, "audit_offsets")
    assert _recorded(run) == [("audit", 1), ("audit", 2), ("audit", 3), ("tracking", 1)]


def test_a_store_written_by_newer_code_is_refused_at_open(
    old_store: tuple[str, str, Run],
) -> None:
    _, url, run = old_store
    open_store(PROJECTIONS, url).close()
    mark = "?" if old_store[0] == "sqlite" else "%s"
    run(
        f"INSERT INTO {MIGRATIONS} (component, version, name, applied_at) "
        f"VALUES ({mark}, {mark}, {mark}, {mark})",
        ("projection", 99, "from the future", "2030-01-01T00:00:00+00:00"),
    )
    with pytest.raises(StoreTooNew, match="projection schema version 99"):
        open_store(PROJECTIONS, url)
