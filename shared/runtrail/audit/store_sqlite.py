"""The embedded audit store: SQLite, one file, the default behind ``sqlite:///path.db``.

Triggers refuse UPDATE and DELETE on links and tree heads: changing the record means going
around the store, which is exactly what verification is there to catch. On
:mod:`runtrail.persistence.sqlite` with ``synchronous=FULL``: a committed batch (and its
offsets) survives a crash or power loss. The statements and the schema (the ``audit``
component's migrations, :data:`~runtrail.audit.store_sql.AUDIT_SQLITE`) are in
:mod:`.store_sql`; offsets live in the one tracking table (component ``audit``), fenced: they
never move back.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from runtrail.audit import store_sql as sql
from runtrail.audit.appending import LinkRow, RunKey
from runtrail.audit.link import Link, RunHead
from runtrail.persistence.sqlite import SqliteDatabase
from runtrail.persistence.tracking import TRACKING
from runtrail.persistence.urls import MEMORY, scheme_of, sqlite_path


def path_from_url(url: str) -> str:
    """The file of an audit store URL: ``sqlite:///var/lib/audit.db`` → ``/var/lib/audit.db``
    (three slashes are absolute here), ``sqlite:///:memory:`` and ``memory://`` in memory."""
    if scheme_of(url) == "memory":
        return MEMORY
    return sqlite_path(url)


def _insert_rows(cur: Any, rows: Sequence[Sequence[Any]], statement: Callable[[int], str]) -> None:
    """Insert ``rows``, :data:`~runtrail.audit.store_sql.SQLITE_INSERT_ROWS` a statement
    (``statement(n)`` inserts n rows). Why not ``executemany``: it runs the statement once per
    row (a step, a reset, and a release of the GIL and a wait to take it back, each time);
    14,000 links took 10 % more CPU that way."""
    for start in range(0, len(rows), sql.SQLITE_INSERT_ROWS):
        chunk = rows[start : start + sql.SQLITE_INSERT_ROWS]
        cur.execute(statement(len(chunk)), list(itertools.chain.from_iterable(chunk)))


#: The page size of a new store. A link is a row of a kilobyte or more and an entry in an
#: index keyed by random eventIds; with 16 KiB pages instead of SQLite's 4 KiB the audit
#: service took 30.4-30.8 µs of CPU an event against 32.2-34.6 and wrote 6 % less (300,000
#: events, three interleaved rounds; docs/PERFORMANCE.md). A store made before keeps its own.
PAGE_SIZE = 16_384


class SqliteLinkStore(sql.SqlLinkStore):
    """:class:`~runtrail.audit.store.LinkStore` on one SQLite file (thread-safe)."""

    INTEGRITY_ERROR = sqlite3.IntegrityError
    MALFORMED_JSON = sqlite3.OperationalError  # "malformed JSON"
    _db: SqliteDatabase

    def __init__(self, path: str | Path) -> None:
        super().__init__(
            SqliteDatabase(
                path,
                synchronous="FULL",
                foreign_keys=True,
                components=[TRACKING, sql.AUDIT_SQLITE],
                page_size=PAGE_SIZE,
            )
        )

    @classmethod
    def from_url(cls, url: str) -> SqliteLinkStore:
        return cls(path_from_url(url))

    # --- writing -------------------------------------------------------------------------
    def _heads_for_append(self, cur: Any, runs: Sequence[RunKey]) -> dict[RunKey, tuple[int, str]]:
        """The transaction is ``BEGIN IMMEDIATE``: no other writer runs until it ends."""
        heads: dict[RunKey, tuple[int, str]] = {}
        for key in runs:
            row = cur.execute(sql.SELECT_HEAD, key).fetchone()
            if row is not None:
                heads[key] = (row[0] + 1, row[1])
        return heads

    def _insert_links(self, cur: Any, rows: Sequence[LinkRow]) -> None:
        _insert_rows(cur, rows, sql.sqlite_insert_links)

    def _insert_tree_head(self, cur: Any, values: Sequence[Any]) -> int:
        return int(cur.execute(sql.INSERT_TREE_HEAD, values).lastrowid or 0)

    def _lock_log(self, cur: Any) -> None:
        """Nothing to take: the transaction is ``BEGIN IMMEDIATE``, the one writer."""

    def _insert_leaves(self, cur: Any, rows: Sequence[sql.LeafRow]) -> None:
        _insert_rows(cur, rows, sql.sqlite_insert_leaves)

    def _insert_log_checkpoint(self, cur: Any, values: Sequence[Any]) -> int:
        return int(cur.execute(sql.INSERT_LOG_CHECKPOINT, values).lastrowid or 0)

    def _insert_committed_heads(
        self, cur: Any, tree_head_id: int, ordered: Sequence[RunHead]
    ) -> None:
        cur.executemany(
            sql.SQLITE_INSERT_COMMITTED_HEAD,
            [
                (tree_head_id, i, h.tenant_id, h.run_id, h.length, h.hash)
                for i, h in enumerate(ordered)
            ],
        )

    # --- reading -------------------------------------------------------------------------
    def find_events(self, tenant_id: str, event_ids: Iterable[str]) -> dict[str, Link]:
        wanted = list(dict.fromkeys(event_ids))
        found: dict[str, Link] = {}
        for start in range(0, len(wanted), sql.SQLITE_IN_CHUNK):
            chunk = wanted[start : start + sql.SQLITE_IN_CHUNK]
            rows = self._query(sql.sqlite_select_events(len(chunk)), (tenant_id, *chunk))
            found.update((str(row[0]), sql.link_from_row(row[1:])) for row in rows)
        return found

    def heads_of(self, runs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], RunHead]:
        found: dict[tuple[str, str], RunHead] = {}
        with self._db.locked() as conn:
            for tenant, run in dict.fromkeys(runs):
                row = conn.execute(sql.SELECT_HEAD, (tenant, run)).fetchone()
                if row is not None:
                    found[(tenant, run)] = RunHead(tenant, run, int(row[0]) + 1, str(row[1]))
        return found

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.locked() as conn:
            return self._tracking.read(conn, topic, partitions)
