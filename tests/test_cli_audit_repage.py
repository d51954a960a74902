"""``runtrail audit repage``: a store made with SQLite's 4 KiB pages rebuilt with 16 KiB ones,
through the real CLI; its chains verify after; refused, the file untouched, while the store is
open elsewhere; said plainly when there is nothing to do or nothing it can do."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

from runtrail.audit import GENESIS_HASH, seal
from runtrail.audit.store import TopicPartition
from runtrail.audit.store_sqlite import SqliteLinkStore
from runtrail.persistence.sqlite import connect
from runtrail.persistence.urls import sqlite_url
from tests.support import form, runtrail_cli

LINKS = 300


def runtrail(*args: str) -> subprocess.CompletedProcess[str]:
    return runtrail_cli({}, *args, timeout=120)


def page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def store_with_small_pages(path: Path) -> None:
    """A store made before new stores got 16 KiB pages, holding one chain of ``LINKS`` links
    with events of a kilobyte."""
    with closing(connect(path)) as conn:
        conn.execute("CREATE TABLE made_before (x)")
    store = SqliteLinkStore(path)
    try:
        links, prev = [], GENESIS_HASH
        for index in range(LINKS):
            event = form(run_id="run-a", eventId=f"e-{index}", data={"text": "x" * 1000})
            links.append(link := seal(index, prev, event))
            prev = link.hash
        store.append_batch(links, {TopicPartition("events", 0): LINKS})
    finally:
        store.close()
    assert page_size(path) == 4096


def test_a_store_with_small_pages_is_rebuilt_and_its_chain_still_verifies(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    store_with_small_pages(path)
    url = sqlite_url(path)
    done = runtrail("audit", "repage", "--store", url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["changed"] is True
    assert (report["pageSizeBefore"], report["pageSize"]) == (4096, 16384)
    assert page_size(path) == 16384
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    verified = runtrail("audit", "verify", "--store", url, "--tenant", "t1", "--run", "run-a")
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["length"] == LINKS
    store = SqliteLinkStore(path)  # still append-only, still appendable
    try:
        head = store.head("t1", "run-a")
        assert head is not None and head.length == LINKS
        nxt = seal(LINKS, head.hash, form(run_id="run-a", eventId="e-next"))
        store.append_batch([nxt], {TopicPartition("events", 0): LINKS + 1})
        with closing(sqlite3.connect(path)) as conn, conn:
            try:
                conn.execute("DELETE FROM audit_links")
                raise AssertionError("a link was deleted")
            except sqlite3.IntegrityError as exc:
                assert "append-only" in str(exc)
    finally:
        store.close()
    again = runtrail("audit", "repage", "--store", url)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["changed"] is False


def test_a_store_open_elsewhere_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    store_with_small_pages(path)
    store = SqliteLinkStore(path)  # a running audit member holds it
    try:
        refused = runtrail("audit", "repage", "--store", sqlite_url(path))
    finally:
        store.close()
    assert refused.returncode == 2
    error = json.loads(refused.stderr.strip().splitlines()[-1])["error"]
    assert str(path) in error and "stop every audit member" in error
    assert page_size(path) == 4096


def test_what_it_cannot_rebuild_is_named(tmp_path: Path) -> None:
    missing = runtrail("audit", "repage", "--store", sqlite_url(tmp_path / "none.db"))
    assert missing.returncode == 2
    assert str(tmp_path / "none.db") in missing.stderr
    assert not (tmp_path / "none.db").exists()
    postgres = runtrail("audit", "repage", "--store", "postgresql://u:secret@db.invalid/audit")
    assert postgres.returncode == 2
    assert "not one" in postgres.stderr and "secret" not in postgres.stderr
