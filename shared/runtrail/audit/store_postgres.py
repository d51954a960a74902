"""The production audit store: PostgreSQL (psycopg 3), behind ``postgresql://…`` URLs.

The same :class:`~runtrail.audit.store.LinkStore` contract as SQLite, with what a shared server
adds:

* **Append-only by trigger.** UPDATE, DELETE and TRUNCATE on links, checkpoints and checkpoint
  heads raise. A role that can drop triggers can still edit rows — which is what verification
  and signed checkpoints are there to catch; revoke UPDATE/DELETE/TRUNCATE (and table
  ownership) from the service's role to close that door too.
* **One writer per head.** ``append_batch`` takes a transaction-scoped advisory lock per run
  of the batch (in a fixed order, so writers cannot deadlock) before reading the heads, so
  two writers can never both extend one head: the second waits, then sees the first's links
  and is refused (or skips them, if they are identical). The primary key (tenant, run, index)
  and the unique (tenant, eventId) back this up.
* **The event is stored as text**, the RFC 8785 bytes that were hashed — not ``jsonb``, which
  would re-order and re-format it.

Links, offsets and checkpoints are written in single transactions; reads run in autocommit.
On :mod:`runtrail.persistence.postgres` (the one pool: health-checked connections, transient
errors as StoreUnavailable); the schema is the ``audit`` component's migrations
(:data:`AUDIT_POSTGRES`), offsets live in the one tracking table, fenced: they never move back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from runtrail.audit.appending import RunKey, rows_to_append
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
from runtrail.persistence.postgres import Cursor, PostgresDatabase
from runtrail.persistence.tracking import TRACKING, Tracking, adopt_statements

#: The tables and triggers as the first release created them (migration 1 adopts them as is).
FIRST_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_links (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    idx BIGINT NOT NULL CHECK (idx >= 0),
    event_id TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, idx),
    UNIQUE (tenant_id, event_id)
);
CREATE TABLE IF NOT EXISTS audit_offsets (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset BIGINT NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    origin TEXT NOT NULL,
    size BIGINT NOT NULL,
    body TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_checkpoints_body ON audit_checkpoints (body);
CREATE TABLE IF NOT EXISTS audit_checkpoint_heads (
    checkpoint_id BIGINT NOT NULL REFERENCES audit_checkpoints (id),
    leaf_index BIGINT NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    length BIGINT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (checkpoint_id, leaf_index)
);
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit records are append-only (% on %)', TG_OP, TG_TABLE_NAME;
END
$$;
CREATE OR REPLACE TRIGGER audit_links_append_only BEFORE UPDATE OR DELETE ON audit_links
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_links_no_truncate BEFORE TRUNCATE ON audit_links
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE
    ON audit_checkpoints FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoint_heads_append_only BEFORE UPDATE OR DELETE
    ON audit_checkpoint_heads FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoint_heads_no_truncate BEFORE TRUNCATE
    ON audit_checkpoint_heads FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
"""

#: The PostgreSQL audit store's schema, in order (the tracking table's migrations come first).
AUDIT_POSTGRES = Component(
    "audit",
    (
        Migration(1, "the first tables", (FIRST_SCHEMA,)),
        Migration(
            2,
            "offsets move into the tracking table",
            adopt_statements("audit", "audit_offsets", "partition"),
        ),
    ),
)

#: Last link of each (tenant, run) given as two arrays: one backward index probe per run.
_HEADS_OF_SQL = """
SELECT k.tenant_id, k.run_id, l.idx, l.hash
FROM unnest(%s::text[], %s::text[]) AS k (tenant_id, run_id)
CROSS JOIN LATERAL (
    SELECT idx, hash FROM audit_links
    WHERE tenant_id = k.tenant_id AND run_id = k.run_id
    ORDER BY idx DESC LIMIT 1
) AS l
"""

#: COPY, not INSERT: about ten times faster for a batch of links, with the same constraints.
_COPY_LINKS_SQL = (
    "COPY audit_links (tenant_id, run_id, idx, event_id, prev_hash, hash, event) FROM STDIN"
)

_LINK_COLUMNS = "idx, prev_hash, hash, event"


def run_lock_key(tenant_id: str, run_id: str) -> int:
    """The advisory-lock key of a run: 64 signed bits of SHA-256(tenant NUL run)."""
    digest = hashlib.sha256(f"{tenant_id}\x00{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


class PostgresLinkStore(CheckpointReads):
    """:class:`~runtrail.audit.store.LinkStore` on PostgreSQL (a connection pool, thread-safe)."""

    PARAM = "%s"

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        if not is_postgres_url(url):
            raise ValueError("not a postgresql:// URL")
        self._db = PostgresDatabase(
            url,
            what="audit store",
            connect_timeout_s=max(1, int(connect_timeout)),
            components=[TRACKING, AUDIT_POSTGRES],
        )
        self._tracking = Tracking(AUDIT_TRACKING, "postgresql")

    @classmethod
    def from_url(cls, url: str) -> PostgresLinkStore:
        return cls(url)

    def close(self) -> None:
        self._db.close()

    # --- writing -------------------------------------------------------------------------
    def append_batch(self, links: Sequence[Link], offsets: Mapping[TopicPartition, int]) -> None:
        """Append links and set offsets in one transaction; all or nothing."""
        runs = sorted({(link.tenant_id, link.run_id) for link in links})
        with self._db.transaction() as conn:
            if runs:
                keys = sorted({run_lock_key(t, r) for t, r in runs})
                conn.execute(
                    "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k", (keys,)
                )
            heads = {key: (h.length, h.hash) for key, h in self._heads_of(conn, runs).items()}
            rows = rows_to_append(links, heads, lambda link: _is_stored(conn, link))
            if rows:
                try:
                    with conn.copy(_COPY_LINKS_SQL) as copy:
                        for row in rows:
                            copy.write_row(row)
                except psycopg.IntegrityError as exc:
                    raise ChainConflict(f"link refused by the store: {exc}") from exc
            record_offsets(self._tracking, conn, offsets)

    def rewind_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Set positions back or forward, past the fence (``runtrail offsets set``)."""
        with self._db.transaction() as cur:
            for (topic, partition), offset in offsets.items():
                self._tracking.rewind(cur, topic, {partition: offset})

    # --- reading -------------------------------------------------------------------------
    def _query(self, sql: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.query(sql, params)

    def load_chain(self, tenant_id: str, run_id: str) -> list[Link]:
        rows = self._query(
            f"SELECT {_LINK_COLUMNS} FROM audit_links "
            "WHERE tenant_id = %s AND run_id = %s ORDER BY idx",
            (tenant_id, run_id),
        )
        return [link_from_row(row, position) for position, row in enumerate(rows)]

    def summaries(self, tenant_id: str, run_id: str) -> list[LinkSummary]:
        members = ", ".join(f"event::jsonb ->> '{name}'" for name in SUMMARY_FIELDS)
        try:
            rows = self._query(
                f"SELECT idx, {members} FROM audit_links "
                "WHERE tenant_id = %s AND run_id = %s ORDER BY idx",
                (tenant_id, run_id),
            )
        except psycopg.errors.InvalidTextRepresentation as exc:  # not JSON: edited behind us
            raise MalformedLink(f"a stored link of {tenant_id}/{run_id}: {exc}") from exc
        return [summary_from_row(row) for row in rows]

    def link_at(self, tenant_id: str, run_id: str, index: int) -> Link | None:
        rows = self._query(
            f"SELECT {_LINK_COLUMNS} FROM audit_links "
            "WHERE tenant_id = %s AND run_id = %s AND idx = %s",
            (tenant_id, run_id, index),
        )
        return link_from_row(rows[0]) if rows else None

    def head(self, tenant_id: str, run_id: str) -> RunHead | None:
        return self.heads_of([(tenant_id, run_id)]).get((tenant_id, run_id))

    def heads_of(self, runs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], RunHead]:
        wanted = list(dict.fromkeys(runs))
        if not wanted:
            return {}
        with self._db.connection() as conn, conn.cursor() as cur:
            return self._heads_of(cur, wanted)

    @staticmethod
    def _heads_of(conn: Cursor, runs: Sequence[RunKey]) -> dict[RunKey, RunHead]:
        if not runs:
            return {}
        rows = conn.execute(_HEADS_OF_SQL, ([t for t, _ in runs], [r for _, r in runs])).fetchall()
        return {
            (str(t), str(r)): RunHead(str(t), str(r), int(i) + 1, str(h)) for t, r, i, h in rows
        }

    def heads(self) -> list[RunHead]:
        rows = self._query(
            "SELECT DISTINCT ON (tenant_id, run_id) tenant_id, run_id, idx, hash "
            "FROM audit_links ORDER BY tenant_id, run_id, idx DESC"
        )
        return order_heads(RunHead(str(t), str(r), int(i) + 1, str(h)) for t, r, i, h in rows)

    def find_event(self, tenant_id: str, event_id: str) -> Link | None:
        return self.find_events(tenant_id, [event_id]).get(event_id)

    def find_events(self, tenant_id: str, event_ids: Iterable[str]) -> dict[str, Link]:
        wanted = list(dict.fromkeys(event_ids))
        if not wanted:
            return {}
        rows = self._query(
            f"SELECT event_id, {_LINK_COLUMNS} FROM audit_links "
            "WHERE tenant_id = %s AND event_id = ANY(%s::text[])",
            (tenant_id, wanted),
        )
        return {str(row[0]): link_from_row(row[1:]) for row in rows}

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.connection() as conn:
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
            row = conn.execute(
                "INSERT INTO audit_checkpoints (origin, size, body, note, created_at) "
                "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                (checkpoint.origin, checkpoint.size, checkpoint.body(), note, created),
            ).fetchone()
            assert row is not None
            checkpoint_id = int(row[0])
            if ordered:
                conn.execute(
                    "INSERT INTO audit_checkpoint_heads "
                    "(checkpoint_id, leaf_index, tenant_id, run_id, length, hash) "
                    "SELECT %s, * FROM unnest("
                    "%s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::text[])",
                    (
                        checkpoint_id,
                        list(range(len(ordered))),
                        [h.tenant_id for h in ordered],
                        [h.run_id for h in ordered],
                        [h.length for h in ordered],
                        [h.hash for h in ordered],
                    ),
                )
        return StoredCheckpoint(checkpoint_id, checkpoint, note, created)


def _is_stored(conn: Cursor, link: Link) -> bool:
    row = conn.execute(
        "SELECT prev_hash, hash, event_id FROM audit_links "
        "WHERE tenant_id = %s AND run_id = %s AND idx = %s",
        (link.tenant_id, link.run_id, link.index),
    ).fetchone()
    return row is not None and tuple(row) == (link.prev_hash, link.hash, link.event_id)
