"""The one PostgreSQL connection management, on a real server: a connection the server drops
is replaced; a transient error is StoreUnavailable; a wrong statement is not."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from runtrail.persistence.postgres import PostgresDatabase
from runtrail.runtime.unavailable import StoreUnavailable


@pytest.fixture
def db(postgres_url: str) -> Iterator[PostgresDatabase]:
    database = PostgresDatabase(postgres_url, what="test store")
    yield database
    database.close()


def _terminate_others(postgres_url: str) -> int:
    """Kill every other session on the test database, as a server restart would."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (killed,) in rows if killed)


def test_a_terminated_connection_is_replaced(db: PostgresDatabase, postgres_url: str) -> None:
    before = db.query("SELECT pg_backend_pid()")[0][0]
    assert _terminate_others(postgres_url) >= 1
    after = db.query("SELECT pg_backend_pid()")[0][0]  # the health check replaced it
    assert after != before
    with db.transaction() as cur:
        cur.execute("CREATE TABLE t (x INTEGER)")
        cur.execute("INSERT INTO t VALUES (1)")
    assert db.query("SELECT x FROM t") == [(1,)]


def test_a_connection_lost_inside_a_transaction_is_store_unavailable(
    db: PostgresDatabase, postgres_url: str
) -> None:
    db.query("CREATE TABLE t (x INTEGER)")
    with pytest.raises(StoreUnavailable) as caught, db.transaction() as cur:
        cur.execute("INSERT INTO t VALUES (1)")
        _terminate_others(postgres_url)
        cur.execute("INSERT INTO t VALUES (2)")
    assert "test store postgresql://" in str(caught.value)
    assert db.query("SELECT COUNT(*) FROM t") == [(0,)]  # rolled back, and usable again


def test_a_wrong_statement_is_not_unavailability(db: PostgresDatabase) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.query("SELECT * FROM no_such_table")
    assert db.query("SELECT 1") == [(1,)]


def test_a_wrong_url_fails_at_open_with_the_servers_reason(postgres_url: str) -> None:
    wrong = postgres_url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(psycopg.OperationalError, match="no_such_database"):
        PostgresDatabase(wrong, what="test store")
