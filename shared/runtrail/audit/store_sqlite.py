"""The embedded audit store: SQLite, one file, the default behind ``sqlite:///path.db``.

Links are stored with their event as the RFC 8785 text that was hashed, so
``sha256(prev_hash || '|' || event)`` can be checked straight off a row. Triggers refuse
UPDATE and DELETE on links and checkpoints: changing the record means going around the store,
which is exactly what verification is there to catch. On :mod:`runtrail.persistence.sqlite`
with ``synchronous=FULL``: a committed batch (and its offsets) survives a crash or power loss.
The schema is the ``audit`` component's migrations (:data:`AUDIT_SQLITE`); offsets live in the
one tracking table (component ``audit``), fenced: they never move back.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runtrail.audit.appending import LinkRow, RunKey, rows_to_append
from runtrail.audit.checkpoint import Checkpoint, order_heads
from runtrail.audit.errors import ChainConflict, MalformedLink
from runtrail.audit.link import Link, LinkSummary, RunHead
from runtrail.audit.sql_reads import (
    SUMMARY_FIELDS,
    CheckpointReads,
    link_from_row,
    summary_from_row,
)
from runtrail.audit.store import StoredCheckpoint, TopicPartition
from runtrail.audit.tracking import AUDIT_TRACKING, record_offsets
from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.sqlite import SqliteDatabase
from runtrail.persistence.tracking import TRACKING, Tracking, adopt_statements
from runtrail.persistence.urls import MEMORY, scheme_of, sqlite_path

#: The tables and triggers as the first release created them (migration 1 adopts them as is).
FIRST_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS audit_links (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    idx INTEGER NOT NULL CHECK (idx >= 0),
    event_id TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, idx),
    UNIQUE (tenant_id, event_id))""",
    """CREATE TRIGGER IF NOT EXISTS audit_links_no_update BEFORE UPDATE ON audit_links
BEGIN SELECT RAISE(ABORT, 'audit links are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_links_no_delete BEFORE DELETE ON audit_links
BEGIN SELECT RAISE(ABORT, 'audit links are append-only'); END""",
    """CREATE TABLE IF NOT EXISTS audit_offsets (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition))""",
    """CREATE TABLE IF NOT EXISTS audit_checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    body TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS audit_checkpoint_heads (
    checkpoint_id INTEGER NOT NULL REFERENCES audit_checkpoints (id),
    leaf_index INTEGER NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    length INTEGER NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (checkpoint_id, leaf_index))""",
    """CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END""",
)

#: The SQLite audit store's schema, in order (the tracking table's migrations come first).
AUDIT_SQLITE = Component(
    "audit",
    (
        Migration(1, "the first tables", FIRST_SCHEMA),
        Migration(
            2,
            "offsets move into the tracking table",
            adopt_statements("audit", "audit_offsets", "partition"),
        ),
    ),
)

#: Most eventIds in one ``IN (…)`` list (SQLite allows 32766 variables since 3.32; stay far below).
_IN_CHUNK = 500

_HEAD_SQL = (
    "SELECT idx, hash FROM audit_links WHERE tenant_id = ? AND run_id = ? ORDER BY idx DESC LIMIT 1"
)


#: Rows per INSERT statement (7 variables each: far below any SQLite's limit of 999 or more).
_INSERT_ROWS = 128
_INSERT = (
    "INSERT INTO audit_links (tenant_id, run_id, idx, event_id, prev_hash, hash, event) VALUES "
)
_ROW_MARKS = "(?, ?, ?, ?, ?, ?, ?)"
_INSERT_FULL = _INSERT + ", ".join([_ROW_MARKS] * _INSERT_ROWS)


def _insert_links(conn: sqlite3.Cursor, rows: Sequence[LinkRow]) -> None:
    """Insert ``rows``, :data:`_INSERT_ROWS` a statement. Why not ``executemany``: it runs
    the statement once per row (a step, a reset, and a release of the GIL and a wait to take
    it back, each time); 14,000 links took 10 % more CPU that way."""
    for start in range(0, len(rows), _INSERT_ROWS):
        chunk = rows[start : start + _INSERT_ROWS]
        sql = (
            _INSERT_FULL
            if len(chunk) == _INSERT_ROWS
            else _INSERT + ", ".join([_ROW_MARKS] * len(chunk))
        )
        conn.execute(sql, list(itertools.chain.from_iterable(chunk)))


def path_from_url(url: str) -> str:
    """The file of an audit store URL: ``sqlite:///var/lib/audit.db`` → ``/var/lib/audit.db``
    (three slashes are absolute here), ``sqlite:///:memory:`` and ``memory://`` in memory."""
    if scheme_of(url) == "memory":
        return MEMORY
    return sqlite_path(url)


class SqliteLinkStore(CheckpointReads):
    """:class:`~runtrail.audit.store.LinkStore` on one SQLite file (thread-safe)."""

    PARAM = "?"

    def __init__(self, path: str | Path) -> None:
        self._db = SqliteDatabase(
            path, synchronous="FULL", foreign_keys=True, components=[TRACKING, AUDIT_SQLITE]
        )
        self._tracking = Tracking(AUDIT_TRACKING, "sqlite")

    @classmethod
    def from_url(cls, url: str) -> SqliteLinkStore:
        return cls(path_from_url(url))

    def close(self) -> None:
        self._db.close()

    # --- writing -------------------------------------------------------------------------
    def append_batch(self, links: Sequence[Link], offsets: Mapping[TopicPartition, int]) -> None:
        """Append links and set offsets in one transaction; all or nothing."""
        with self._db.transaction() as conn:
            rows = self._new_rows(conn, links)
            try:
                _insert_links(conn, rows)
            except sqlite3.IntegrityError as exc:
                raise ChainConflict(f"link refused by the store: {exc}") from exc
            record_offsets(self._tracking, conn, offsets)

    def rewind_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Set positions back or forward, past the fence (``runtrail offsets set``)."""
        with self._db.transaction() as cur:
            for (topic, partition), offset in offsets.items():
                self._tracking.rewind(cur, topic, {partition: offset})

    def _new_rows(self, conn: sqlite3.Cursor, links: Sequence[Link]) -> list[LinkRow]:
        """Rows to insert, after checking each link extends its run's head."""
        heads: dict[RunKey, tuple[int, str]] = {}
        for key in {(link.tenant_id, link.run_id) for link in links}:
            row = conn.execute(_HEAD_SQL, key).fetchone()
            if row is not None:
                heads[key] = (row[0] + 1, row[1])
        return rows_to_append(
            links, heads, lambda link: self._is_stored(conn, link.tenant_id, link.run_id, link)
        )

    @staticmethod
    def _is_stored(conn: sqlite3.Cursor, tenant: str, run: str, link: Link) -> bool:
        row = conn.execute(
            "SELECT prev_hash, hash, event_id FROM audit_links "
            "WHERE tenant_id = ? AND run_id = ? AND idx = ?",
            (tenant, run, link.index),
        ).fetchone()
        return row is not None and tuple(row) == (link.prev_hash, link.hash, link.event_id)

    # --- reading -------------------------------------------------------------------------
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.query(sql, params)

    def load_chain(self, tenant_id: str, run_id: str) -> list[Link]:
        rows = self._query(
            "SELECT idx, prev_hash, hash, event FROM audit_links "
            "WHERE tenant_id = ? AND run_id = ? ORDER BY idx",
            (tenant_id, run_id),
        )
        return [link_from_row(row, position) for position, row in enumerate(rows)]

    def summaries(self, tenant_id: str, run_id: str) -> list[LinkSummary]:
        members = ", ".join(f"json_extract(event, '$.{name}')" for name in SUMMARY_FIELDS)
        try:
            rows = self._query(
                f"SELECT idx, {members} FROM audit_links "
                "WHERE tenant_id = ? AND run_id = ? ORDER BY idx",
                (tenant_id, run_id),
            )
        except sqlite3.OperationalError as exc:  # "malformed JSON": a row edited behind us
            raise MalformedLink(f"a stored link of {tenant_id}/{run_id}: {exc}") from exc
        return [summary_from_row(row) for row in rows]

    def link_at(self, tenant_id: str, run_id: str, index: int) -> Link | None:
        rows = self._query(
            "SELECT idx, prev_hash, hash, event FROM audit_links "
            "WHERE tenant_id = ? AND run_id = ? AND idx = ?",
            (tenant_id, run_id, index),
        )
        return link_from_row(rows[0]) if rows else None

    def head(self, tenant_id: str, run_id: str) -> RunHead | None:
        rows = self._query(_HEAD_SQL, (tenant_id, run_id))
        if not rows:
            return None
        idx, hash_ = rows[0]
        return RunHead(tenant_id, run_id, int(idx) + 1, str(hash_))

    def heads(self) -> list[RunHead]:
        rows = self._query(
            "SELECT l.tenant_id, l.run_id, l.idx, l.hash FROM audit_links AS l "
            "JOIN (SELECT tenant_id, run_id, MAX(idx) AS idx FROM audit_links "
            "GROUP BY tenant_id, run_id) AS m USING (tenant_id, run_id, idx)"
        )
        return order_heads(RunHead(str(t), str(r), int(i) + 1, str(h)) for t, r, i, h in rows)

    def find_event(self, tenant_id: str, event_id: str) -> Link | None:
        rows = self._query(
            "SELECT idx, prev_hash, hash, event FROM audit_links "
            "WHERE tenant_id = ? AND event_id = ?",
            (tenant_id, event_id),
        )
        return link_from_row(rows[0]) if rows else None

    def find_events(self, tenant_id: str, event_ids: Iterable[str]) -> dict[str, Link]:
        wanted = list(dict.fromkeys(event_ids))
        found: dict[str, Link] = {}
        for start in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[start : start + _IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            rows = self._query(
                "SELECT event_id, idx, prev_hash, hash, event FROM audit_links "
                f"WHERE tenant_id = ? AND event_id IN ({marks})",
                (tenant_id, *chunk),
            )
            found.update((str(row[0]), link_from_row(row[1:])) for row in rows)
        return found

    def heads_of(self, runs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], RunHead]:
        found: dict[tuple[str, str], RunHead] = {}
        with self._db.locked() as conn:
            for tenant, run in dict.fromkeys(runs):
                row = conn.execute(_HEAD_SQL, (tenant, run)).fetchone()
                if row is not None:
                    found[(tenant, run)] = RunHead(tenant, run, int(row[0]) + 1, str(row[1]))
        return found

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.locked() as conn:
            return self._tracking.read(conn, topic, partitions)

    # --- checkpoints ---------------------------------------------------------------------
    def save_checkpoint(
        self, note: str, checkpoint: Checkpoint, heads: Sequence[RunHead]
    ) -> StoredCheckpoint:
        ordered = order_heads(heads)
        if len(ordered) != checkpoint.size:
            raise ValueError(f"{len(ordered)} heads for a checkpoint of size {checkpoint.size}")
        created = datetime.now(UTC).isoformat()
        with self._db.transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO audit_checkpoints (origin, size, body, note, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (checkpoint.origin, checkpoint.size, checkpoint.body(), note, created),
            )
            checkpoint_id = int(cursor.lastrowid or 0)
            conn.executemany(
                "INSERT INTO audit_checkpoint_heads "
                "(checkpoint_id, leaf_index, tenant_id, run_id, length, hash) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (checkpoint_id, i, h.tenant_id, h.run_id, h.length, h.hash)
                    for i, h in enumerate(ordered)
                ],
            )
        return StoredCheckpoint(checkpoint_id, checkpoint, note, created)
