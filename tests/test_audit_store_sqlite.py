"""What only the SQLite link store has; the store contract itself (batches with offsets, no
double sealing, tampering found, checkpoints) runs on SQLite and PostgreSQL alike in
tests/test_audit_store_contract.py."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from runtrail.audit import GENESIS_HASH, LinkStore, seal
from runtrail.audit.store_sqlite import PAGE_SIZE, SqliteLinkStore, path_from_url
from runtrail.persistence.sqlite import connect
from tests.support import form


def test_is_a_link_store(tmp_path: Path) -> None:
    store = SqliteLinkStore(tmp_path / "audit.db")
    typed: LinkStore = store
    assert typed.heads() == []


def test_url_paths() -> None:
    assert path_from_url("sqlite:///var/lib/runtrail/audit.db") == "/var/lib/runtrail/audit.db"
    assert path_from_url("sqlite:///:memory:") == ":memory:"
    for bad in ("postgresql://h/db", "sqlite://host/x.db", "sqlite:"):
        with pytest.raises(ValueError):
            path_from_url(bad)


def _page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def test_a_new_store_has_large_pages_and_an_earlier_one_keeps_its_own(tmp_path: Path) -> None:
    SqliteLinkStore(tmp_path / "new.db").close()
    assert _page_size(tmp_path / "new.db") == PAGE_SIZE == 16_384
    # a store made with SQLite's default pages (as every store before): opened, appended to
    # and read back as it is, never rebuilt
    with closing(connect(tmp_path / "old.db")) as conn:
        conn.execute("CREATE TABLE made_before (x)")
    assert _page_size(tmp_path / "old.db") == 4096
    store = SqliteLinkStore(tmp_path / "old.db")
    try:
        event = form(run_id="run-a", eventId="e-1")
        store.append_batch([seal(0, GENESIS_HASH, event)], {("events", 0): 1})
        assert [link.event for link in store.load_chain("t1", "run-a")] == [event]
    finally:
        store.close()
    assert _page_size(tmp_path / "old.db") == 4096
