"""The PostgreSQL projection store (psycopg 3): ``postgresql://…`` or ``postgres://…`` URLs.

The same tables, statements and fences as the SQLite store (``store_sql``, with its ``?``
placeholders turned into ``%s``); state is TEXT holding the projection's JSON, so ``get`` and
``list`` return exactly what SQLite returns for the same writes.

* **One transaction per batch.** Projections, halts, snapshots and offsets commit together or
  not at all; a fenced write raises :class:`StoreConflict` inside the transaction, which rolls
  the whole batch back.
* **Concurrent writers serialise.** The fences are conflict-checked upserts
  (``ON CONFLICT … DO UPDATE … WHERE``): PostgreSQL locks the conflicting row and re-checks the
  ``WHERE`` against its latest committed version, so two writers of one run or one partition
  cannot both move it backwards — the second waits for the first, then is refused. Before its
  writes a batch takes a transaction-scoped advisory lock per run and per (topic, partition) it
  touches, in ascending lock-id order, so two batches touching the same keys in different
  orders wait for each other instead of deadlocking.

Reads run in autocommit. One connection, guarded by a lock (thread-safe); a broken connection
is replaced on the next call.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import psycopg

from runtrail.persistence.kinds import PROJECTIONS
from runtrail.persistence.registry import register
from runtrail.projection import store_sql as sql
from runtrail.projection.snapshot import ProjectionSnapshot
from runtrail.projection.store import (
    EventCoordinates,
    Halt,
    ProjectionBatch,
    StoredList,
    StoredProjection,
)

Connection = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]
T = TypeVar("T")

#: Serialises schema creation between processes starting at once (CREATE … IF NOT EXISTS is
#: not race-free in PostgreSQL). An arbitrary constant: "rtprojn" in ASCII.
_SCHEMA_LOCK = 0x727470726F6A6E

_SELECT_ONE = sql.format_style(sql.SELECT_ONE)
_SELECT_OFFSET = sql.format_style(sql.SELECT_OFFSET)
_SELECT_OFFSETS = sql.format_style(sql.SELECT_OFFSETS)
_SET_OFFSET = sql.format_style(sql.SET_OFFSET)
_SELECT_SNAPSHOT = sql.format_style(sql.SELECT_SNAPSHOT)
_LOCK = "SELECT pg_advisory_xact_lock(%s)"


def _lock_id(*parts: str) -> int:
    """A signed 64-bit advisory lock id for a key (namespaced, so other stores' ids differ)."""
    digest = hashlib.blake2b("\x00".join(("runtrail.projection", *parts)).encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


def batch_lock_ids(batch: ProjectionBatch) -> list[int]:
    """The advisory locks a batch takes, ascending: one per run and per (topic, partition)."""
    ids = {_lock_id("run", p.tenant_id, p.run_id) for p in batch.projections}
    ids.update(_lock_id("run", h.tenant_id, h.run_id) for h in batch.halts)
    ids.update(_lock_id("run", s.state.tenant_id, s.state.run_id) for s in batch.snapshots)
    ids.update(_lock_id("offset", topic, str(part)) for topic, part in batch.offsets)
    return sorted(ids)


class PostgresProjectionStore:
    """:class:`~runtrail.projection.store.ProjectionStore` on one PostgreSQL database."""

    def __init__(self, url: str, *, connect_timeout_s: int = 10) -> None:
        self.url = url
        self._writer = sql.BatchWriter(sql.format_style)
        self._timeout = connect_timeout_s
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._run(self._create_schema)

    # --- connection ----------------------------------------------------------------------------
    def _connection(self) -> Connection:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=self._timeout
            )
        return conn

    def _run(self, work: Callable[[Connection], T]) -> T:
        with self._lock:
            return work(self._connection())

    @staticmethod
    def _create_schema(conn: Connection) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in sql.SCHEMA:
                conn.execute(statement)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # --- writes --------------------------------------------------------------------------------
    def apply_batch(self, batch: ProjectionBatch) -> None:
        def work(conn: Connection) -> None:
            with conn.transaction(), conn.cursor() as cur:
                locks = batch_lock_ids(batch)
                if locks:
                    cur.executemany(_LOCK, [(lock,) for lock in locks])
                for state in batch.projections:
                    self._writer.projection(cur, state)
                for halt in batch.halts:
                    self._writer.halt(cur, halt)
                for snapshot in batch.snapshots:
                    self._writer.snapshot(cur, snapshot)
                for (topic, partition), offset in batch.offsets.items():
                    self._writer.offset(cur, topic, partition, offset)

        self._run(work)

    def rewind_offsets(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets, back or forward, past the fence (``runtrail offsets set``); under
        the same per-partition locks as :meth:`apply_batch`."""

        def work(conn: Connection) -> None:
            with conn.transaction(), conn.cursor() as cur:
                locks = sorted({_lock_id("offset", topic, str(p)) for p in offsets})
                cur.executemany(_LOCK, [(lock,) for lock in locks])
                cur.executemany(_SET_OFFSET, [(topic, p, o) for p, o in offsets.items()])

        self._run(work)

    def halt(self, tenant_id: str, run_id: str, reason: str, coordinates: EventCoordinates) -> None:
        self.apply_batch(ProjectionBatch(halts=[Halt(tenant_id, run_id, reason, coordinates)]))

    def save_snapshot(self, snapshot: ProjectionSnapshot) -> None:
        self.apply_batch(ProjectionBatch(snapshots=[snapshot]))

    # --- reads ---------------------------------------------------------------------------------
    def _query(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._run(lambda conn: conn.execute(statement, params).fetchall())

    def get(self, tenant_id: str, run_id: str) -> StoredProjection | None:
        rows = self._query(_SELECT_ONE, (tenant_id, run_id))
        return sql.stored_row(rows[0]) if rows else None

    def list(
        self,
        status: str | None = None,
        tenant: str | None = None,
        *,
        halted: bool | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> StoredList:
        statement, params = sql.list_statement(
            status, tenant, halted, limit, order=sql.ORDER_ROWS_BYTEWISE, run_id=run_id
        )
        return [sql.stored_row(r) for r in self._query(sql.format_style(statement), params)]

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        wanted = set(partitions)
        rows = self._query(_SELECT_OFFSETS, (topic,))
        return {int(p): int(o) for p, o in rows if p in wanted}

    def load_snapshot(self, tenant_id: str, run_id: str) -> ProjectionSnapshot | None:
        rows = self._query(_SELECT_SNAPSHOT, (tenant_id, run_id))
        return sql.stored_snapshot(tenant_id, run_id, rows[0]) if rows else None


register(PROJECTIONS, ("postgresql", "postgres"), PostgresProjectionStore)
