"""The one SQLite configuration: private file, WAL, busy timeout, synchronous, autocommit,
any thread; transactions are all or nothing."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runtrail.persistence.sqlite import BUSY_TIMEOUT_MS, CACHE_KIB, SqliteDatabase, connect
from runtrail.persistence.urls import MEMORY


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_file_is_private_and_the_pragmas_are_set(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "store.db"
    conn = connect(path)
    try:
        assert _mode(path) == 0o600
        assert _mode(path.parent) == 0o700 and _mode(path.parent.parent) == 0o700
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_MS,)
        assert conn.execute("PRAGMA cache_size").fetchone() == (-CACHE_KIB,)
        assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (0,)
        assert conn.isolation_level is None
        conn.execute("CREATE TABLE t (x INTEGER)")
        assert not conn.in_transaction  # autocommit: nothing left open
    finally:
        conn.close()


def test_full_synchronous_and_foreign_keys_on_request(tmp_path: Path) -> None:
    conn = connect(tmp_path / "audit.db", synchronous="FULL", foreign_keys=True)
    try:
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    finally:
        conn.close()
    with pytest.raises(ValueError, match="NORMAL or FULL"):
        connect(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]


def test_a_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "t.db")
    try:
        with db.transaction() as cur:
            cur.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
        with pytest.raises(sqlite3.IntegrityError), db.transaction() as cur:
            cur.execute("INSERT INTO t VALUES (1)")
            cur.execute("INSERT INTO t VALUES (1)")
        assert db.query("SELECT COUNT(*) FROM t") == [(0,)]
        with db.transaction() as cur:
            cur.execute("INSERT INTO t VALUES (?)", (2,))
        assert db.query("SELECT x FROM t") == [(2,)]
    finally:
        db.close()


def test_the_database_is_usable_from_another_thread_and_by_a_second_process(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    db = SqliteDatabase(path)
    other = SqliteDatabase(path)  # as another process would open it
    try:
        with db.transaction() as cur:
            cur.execute("CREATE TABLE t (x INTEGER)")
        seen: list[object] = []

        def write() -> None:
            try:
                with db.transaction() as cur:
                    cur.execute("INSERT INTO t VALUES (1)")
            except BaseException as exc:
                seen.append(exc)

        thread = threading.Thread(target=write)
        thread.start()
        thread.join()
        assert seen == []
        assert other.query("SELECT x FROM t") == [(1,)]
    finally:
        db.close()
        other.close()


def test_an_in_memory_database_needs_no_file() -> None:
    db = SqliteDatabase(MEMORY)
    try:
        with db.transaction() as cur:
            cur.execute("CREATE TABLE t (x INTEGER)")
        assert db.query("SELECT COUNT(*) FROM t") == [(0,)]
    finally:
        db.close()


def _other_process(path: Path, statement: str) -> str:
    """Run one statement in a new process's own connection, closed again (as a reader that
    polls the file does); its first row's first value."""
    script = (
        "import sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "print(conn.execute(sys.argv[2]).fetchone()[0])\n"
        "conn.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path), statement],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_second_connection_keeps_the_first_ones_writes_visible_to_other_processes(
    tmp_path: Path,
) -> None:
    """Opening a second connection of the same process (a store's reader beside its writer)
    must not drop the first one's locks: else another process closing its connection takes
    itself for the last one and deletes the WAL the writer keeps committing into, and no
    other process sees those commits until the writer closes."""
    path = tmp_path / "store.db"
    first = SqliteDatabase(path)  # the file exists already, as on every restart
    with first.transaction() as cur:
        cur.execute("CREATE TABLE t (x INTEGER)")
    first.close()
    writer = SqliteDatabase(path)
    reader = SqliteDatabase(path)
    try:
        assert _other_process(path, "SELECT COUNT(*) FROM t") == "0"
        with writer.transaction() as cur:
            cur.execute("INSERT INTO t VALUES (1)")
        assert _other_process(path, "SELECT COUNT(*) FROM t") == "1"
        assert reader.query("SELECT COUNT(*) FROM t") == [(1,)]
        assert Path(f"{path}-wal").exists()  # the writer's WAL is still the file's
    finally:
        reader.close()
        writer.close()
