"""Numbered migrations on SQLite and real PostgreSQL: applied once, in order, recorded;
concurrent openers serialise; a store newer than the code is refused."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtrail.persistence.migrations import (
    TABLE,
    Component,
    Migration,
    StoreTooNew,
    applied,
    migrate,
)
from tests.persistence_support import Backend, backend

__all__ = ["backend"]

# deliberately not idempotent: a second run, or two runs at once, would fail or double rows
FIRST = Migration(1, "create things", ("CREATE TABLE things (x INTEGER)",))
SECOND = Migration(2, "seed things", ("INSERT INTO things VALUES (1)",))


def _add_column(cur: Any) -> None:
    cur.execute("ALTER TABLE things ADD COLUMN y INTEGER")


THIRD = Migration(3, "add y", _add_column)


def test_migrations_apply_once_in_order_and_are_recorded(backend: Backend) -> None:
    db = backend.open()
    component = Component("things", (FIRST, SECOND))
    assert migrate(db.transaction, db.dialect, [component]) == {"things": 0}
    assert migrate(db.transaction, db.dialect, [component]) == {"things": 2}
    assert db.query("SELECT x FROM things") == [(1,)]
    with db.transaction() as cur:
        assert list(applied(cur)) == [("things", 1, "create things"), ("things", 2, "seed things")]
    stamps = db.query(f"SELECT applied_at FROM {TABLE}")
    assert len(stamps) == 2 and all("T" in str(s) for (s,) in stamps)
    newer = Component("things", (FIRST, SECOND, THIRD))
    assert migrate(db.transaction, db.dialect, [newer]) == {"things": 2}
    assert db.query("SELECT x, y FROM things") == [(1, None)]


def test_a_failing_migration_applies_nothing(backend: Backend) -> None:
    db = backend.open()
    broken = Migration(2, "broken", ("INSERT INTO things VALUES (1)", "SELECT * FROM nowhere"))
    with pytest.raises(Exception, match="nowhere"):
        migrate(db.transaction, db.dialect, [Component("things", (FIRST, broken))])
    assert migrate(db.transaction, db.dialect, [Component("things", (FIRST,))]) == {"things": 0}


def test_a_store_newer_than_the_code_is_refused(backend: Backend) -> None:
    db = backend.open()
    migrate(db.transaction, db.dialect, [Component("things", (FIRST, SECOND, THIRD))])
    with pytest.raises(StoreTooNew, match="things schema version 3, newer than 2"):
        migrate(db.transaction, db.dialect, [Component("things", (FIRST, SECOND))], where="x")
    assert db.query("SELECT COUNT(*) FROM things") == [(1,)]


def test_concurrent_openers_serialise(backend: Backend) -> None:
    starters = 4
    dbs = [backend.open() for _ in range(starters)]
    component = Component("things", (FIRST, SECOND))
    start = threading.Barrier(starters)
    errors: list[BaseException] = []

    def open_one(db: Any) -> None:
        try:
            start.wait(10)
            migrate(db.transaction, db.dialect, [component])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(db,)) for db in dbs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert dbs[0].query("SELECT x FROM things") == [(1,)]
    assert dbs[0].query(f"SELECT COUNT(*) FROM {TABLE}") == [(2,)]


def test_components_are_numbered_from_one() -> None:
    with pytest.raises(ValueError, match="numbered"):
        Component("bad", (SECOND,))
