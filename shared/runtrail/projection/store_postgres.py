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

from collections.abc import Iterable
from typing import Any

from runtrail.persistence.postgres import PostgresDatabase, lock_id
from runtrail.persistence.tracking import TRACKING
from runtrail.projection import store_sql as sql
from runtrail.projection.store import ProjectionBatch

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


class PostgresProjectionStore(sql.SqlProjectionStore):
    """:class:`~runtrail.projection.store.ProjectionStore` on one PostgreSQL database."""

    LIST_ORDER = sql.ORDER_ROWS_BYTEWISE
    BYTEWISE = ' COLLATE "C"'
    _db: PostgresDatabase

    def __init__(self, url: str, *, connect_timeout_s: int = 10) -> None:
        super().__init__(
            PostgresDatabase(
                url,
                what="projection store",
                connect_timeout_s=connect_timeout_s,
                components=[TRACKING, sql.PROJECTION],
            )
        )
        self.url = url

    def _lock_batch(self, cur: Any, batch: ProjectionBatch) -> None:
        locks = batch_lock_ids(batch)
        if locks:
            cur.executemany(_LOCK, [(lock,) for lock in locks])

    def _lock_offsets(self, cur: Any, topic: str, partitions: Iterable[int]) -> None:
        locks = sorted({_lock_id("offset", topic, str(p)) for p in partitions})
        cur.executemany(_LOCK, [(lock,) for lock in locks])

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.connection() as conn:
            return self._writer.tracking.read(conn, topic, partitions)
