"""The production audit store: PostgreSQL (psycopg 3), behind ``postgresql://…`` URLs.

The same :class:`~runtrail.audit.store.LinkStore` contract as SQLite, with what a shared server
adds:

* **Append-only by trigger.** UPDATE, DELETE and TRUNCATE on links, tree heads and the heads
  they commit to raise. A role that can drop triggers can still edit rows — which is what verification
  and signed tree heads are there to catch; revoke UPDATE/DELETE/TRUNCATE (and table
  ownership) from the service's role to close that door too.
* **One writer per head.** ``append_batch`` takes a transaction-scoped advisory lock per run
  of the batch (in a fixed order, so writers cannot deadlock) before reading the heads, so
  two writers can never both extend one head: the second waits, then sees the first's links
  and is refused (or skips them, if they are identical). The primary key (tenant, run, index)
  and the unique (tenant, eventId) back this up.
* **The event is stored as text**, the RFC 8785 bytes that were hashed — not ``jsonb``, which
  would re-order and re-format it.

Links, offsets and tree heads are written in single transactions; reads run in autocommit.
On :mod:`runtrail.persistence.postgres` (the one pool: health-checked connections, transient
errors as StoreUnavailable). The statements and the schema (the ``audit`` component's
migrations, :data:`~runtrail.audit.store_sql.AUDIT_POSTGRES`) are in :mod:`.store_sql`;
offsets live in the one tracking table, fenced: they never move back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from runtrail.audit import store_sql as sql
from runtrail.audit.appending import LinkRow, RunKey
from runtrail.audit.link import Link, RunHead
from runtrail.persistence.dialect import placeholders
from runtrail.persistence.postgres import Cursor, PostgresDatabase
from runtrail.persistence.tracking import TRACKING


def _postgres(statement: str) -> str:
    return placeholders(statement, "postgresql")


_LOCK_RUNS = _postgres(sql.POSTGRES_LOCK_RUNS)
_HEADS_OF = _postgres(sql.POSTGRES_HEADS_OF)
_SELECT_EVENTS = _postgres(sql.POSTGRES_SELECT_EVENTS)
_INSERT_TREE_HEAD = _postgres(sql.POSTGRES_INSERT_TREE_HEAD)
_INSERT_COMMITTED_HEADS = _postgres(sql.POSTGRES_INSERT_COMMITTED_HEADS)
_INSERT_LOG_CHECKPOINT = _postgres(sql.INSERT_LOG_CHECKPOINT + " RETURNING id")


def run_lock_key(tenant_id: str, run_id: str) -> int:
    """The advisory-lock key of a run: 64 signed bits of SHA-256(tenant NUL run)."""
    digest = hashlib.sha256(f"{tenant_id}\x00{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


class PostgresLinkStore(sql.SqlLinkStore):
    """:class:`~runtrail.audit.store.LinkStore` on PostgreSQL (a connection pool, thread-safe)."""

    INTEGRITY_ERROR = psycopg.IntegrityError
    MALFORMED_JSON = psycopg.errors.InvalidTextRepresentation  # a stored event is not JSON
    _db: PostgresDatabase

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        if not is_postgres_url(url):
            raise ValueError("not a postgresql:// URL")
        super().__init__(
            PostgresDatabase(
                url,
                what="audit store",
                connect_timeout_s=max(1, int(connect_timeout)),
                components=[TRACKING, sql.AUDIT_POSTGRES],
            )
        )

    @classmethod
    def from_url(cls, url: str) -> PostgresLinkStore:
        return cls(url)

    # --- writing -------------------------------------------------------------------------
    def _heads_for_append(self, cur: Any, runs: Sequence[RunKey]) -> dict[RunKey, tuple[int, str]]:
        """One advisory lock per run, in ascending key order (so writers cannot deadlock),
        before the heads are read: a second writer waits, then sees the first one's links."""
        if runs:
            cur.execute(_LOCK_RUNS, (sorted({run_lock_key(t, r) for t, r in runs}),))
        return {key: (h.length, h.hash) for key, h in _heads_of(cur, runs).items()}

    def _insert_links(self, cur: Any, rows: Sequence[LinkRow]) -> None:
        _copy_rows(cur, sql.POSTGRES_COPY_LINKS, rows)

    def _insert_tree_head(self, cur: Any, values: Sequence[Any]) -> int:
        row = cur.execute(_INSERT_TREE_HEAD, values).fetchone()
        assert row is not None
        return int(row[0])

    def _lock_log(self, cur: Any) -> None:
        """Taken after the runs' locks (always in that order, so appends cannot deadlock)."""
        cur.execute(sql.POSTGRES_LOG_LOCK)

    def _insert_leaves(self, cur: Any, rows: Sequence[sql.LeafRow]) -> None:
        _copy_rows(cur, sql.POSTGRES_COPY_LEAVES, rows)

    def _insert_log_checkpoint(self, cur: Any, values: Sequence[Any]) -> int:
        row = cur.execute(_INSERT_LOG_CHECKPOINT, values).fetchone()
        assert row is not None
        return int(row[0])

    def _insert_committed_heads(
        self, cur: Any, tree_head_id: int, ordered: Sequence[RunHead]
    ) -> None:
        cur.execute(
            _INSERT_COMMITTED_HEADS,
            (
                tree_head_id,
                list(range(len(ordered))),
                [h.tenant_id for h in ordered],
                [h.run_id for h in ordered],
                [h.length for h in ordered],
                [h.hash for h in ordered],
            ),
        )

    # --- reading -------------------------------------------------------------------------
    def find_events(self, tenant_id: str, event_ids: Iterable[str]) -> dict[str, Link]:
        wanted = list(dict.fromkeys(event_ids))
        if not wanted:
            return {}
        rows = self._db.query(_SELECT_EVENTS, (tenant_id, wanted))
        return {str(row[0]): sql.link_from_row(row[1:]) for row in rows}

    def heads_of(self, runs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], RunHead]:
        wanted = list(dict.fromkeys(runs))
        if not wanted:
            return {}
        with self._db.connection() as conn, conn.cursor() as cur:
            return _heads_of(cur, wanted)

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.connection() as conn:
            return self._tracking.read(conn, topic, partitions)


def _heads_of(cur: Cursor, runs: Sequence[RunKey]) -> dict[RunKey, RunHead]:
    """The heads of ``runs`` that have links, in one statement."""
    if not runs:
        return {}
    rows = cur.execute(_HEADS_OF, ([t for t, _ in runs], [r for _, r in runs])).fetchall()
    return {(str(row[0]), str(row[1])): sql.head_from_row(row) for row in rows}


def _copy_rows(cur: Cursor, statement: str, rows: Sequence[Sequence[Any]]) -> None:
    """Write ``rows`` with ``COPY … FROM STDIN``: one round trip for a whole batch."""
    with cur.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)
