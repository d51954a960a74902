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

On :mod:`runtrail.persistence.postgres` (the one pool: health-checked connections, transient
errors as StoreUnavailable); the schema is migrated at open (:data:`store_sql.PROJECTION`),
offsets live in the tracking table. Reads run in autocommit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runtrail.persistence.dialect import placeholders
from runtrail.persistence.postgres import PostgresDatabase, lock_id
from runtrail.persistence.tracking import TRACKING
from runtrail.projection import store_sql as sql
from runtrail.projection.snapshot import ProjectionSnapshot
from runtrail.projection.store import (
    EventCoordinates,
    Halt,
    ProjectionBatch,
    StoredList,
    StoredProjection,
)

_SELECT_ONE = placeholders(sql.SELECT_ONE, "postgresql")
_SELECT_SNAPSHOT = placeholders(sql.SELECT_SNAPSHOT, "postgresql")
_LOCK = "SELECT pg_advisory_xact_lock(%s)"


def _lock_id(*parts: str) -> int:
    """A signed 64-bit advisory lock id for a key (namespaced, so other stores' ids differ)."""
    return lock_id("runtrail.projection", *parts)


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
        self._writer = sql.BatchWriter("postgresql")
        self._db = PostgresDatabase(
            url,
            what="projection store",
            connect_timeout_s=connect_timeout_s,
            components=[TRACKING, sql.PROJECTION],
        )

    def close(self) -> None:
        self._db.close()

    # --- writes --------------------------------------------------------------------------------
    def apply_batch(self, batch: ProjectionBatch) -> None:
        with self._db.transaction() as cur:
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

    def rewind_offsets(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets, back or forward, past the fence (``runtrail offsets set``); under
        the same per-partition locks as :meth:`apply_batch`."""

        with self._db.transaction() as cur:
            locks = sorted({_lock_id("offset", topic, str(p)) for p in offsets})
            cur.executemany(_LOCK, [(lock,) for lock in locks])
            self._writer.tracking.rewind(cur, topic, offsets)

    def halt(self, tenant_id: str, run_id: str, reason: str, coordinates: EventCoordinates) -> None:
        self.apply_batch(ProjectionBatch(halts=[Halt(tenant_id, run_id, reason, coordinates)]))

    def save_snapshot(self, snapshot: ProjectionSnapshot) -> None:
        self.apply_batch(ProjectionBatch(snapshots=[snapshot]))

    # --- reads ---------------------------------------------------------------------------------
    def get(self, tenant_id: str, run_id: str) -> StoredProjection | None:
        rows = self._db.query(_SELECT_ONE, (tenant_id, run_id))
        return sql.stored_row(rows[0]) if rows else None

    def list(
        self,
        status: str | None = None,
        tenant: str | None = None,
        *,
        halted: bool | None = None,
        limit: int | None = None,
        run_id: str | None = None,
        after: str | None = None,
    ) -> StoredList:
        statement, params = sql.list_statement(
            status,
            tenant,
            halted,
            limit,
            order=sql.ORDER_ROWS_BYTEWISE,
            run_id=run_id,
            after=after,
            bytewise=' COLLATE "C"',
        )
        return [
            sql.stored_row(r) for r in self._db.query(placeholders(statement, "postgresql"), params)
        ]

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.connection() as conn:
            return self._writer.tracking.read(conn, topic, partitions)

    def load_snapshot(self, tenant_id: str, run_id: str) -> ProjectionSnapshot | None:
        rows = self._db.query(_SELECT_SNAPSHOT, (tenant_id, run_id))
        return sql.stored_snapshot(tenant_id, run_id, rows[0]) if rows else None
