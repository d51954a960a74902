"""The SQLite projection store: the embedded default (``sqlite:///path.db``).

One connection in autocommit mode; every write is an explicit ``BEGIN IMMEDIATE`` … ``COMMIT``,
so a batch is all or nothing. WAL lets ``runtrail projection show`` read while the service
writes. ``synchronous=NORMAL`` is safe here: a power cut can lose only whole last transactions,
and since offsets commit with the rows they cover, the lost events are simply consumed again.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runtrail.projection import store_sql as sql
from runtrail.projection.model import RunProjection
from runtrail.projection.projector import PROJECTOR_VERSION
from runtrail.projection.snapshot import ProjectionSnapshot
from runtrail.projection.store import (
    EventCoordinates,
    Halt,
    ProjectionBatch,
    StoreConflict,
    StoredList,
    StoredProjection,
)

MEMORY = ":memory:"


def sqlite_path(rest: str) -> str:
    """The file of ``sqlite://<rest>``: ``/rel.db`` -> ``rel.db``, ``//abs.db`` -> ``/abs.db``."""
    if rest in ("", "/", "/" + MEMORY):
        return MEMORY
    if not rest.startswith("/"):
        raise ValueError(f"sqlite URLs have no host: sqlite://{rest} (use sqlite:///path.db)")
    return rest[1:]


class SqliteProjectionStore:
    """:class:`~runtrail.projection.store.ProjectionStore` on one SQLite database file."""

    def __init__(self, path: str | Path) -> None:
        target = str(path)
        if target != MEMORY:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA busy_timeout = 10000")
            if target != MEMORY:
                self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
        with self._transaction() as cur:
            for statement in sql.SCHEMA:
                cur.execute(statement)

    # --- writes ------------------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            finally:
                cur.close()

    def apply_batch(self, batch: ProjectionBatch) -> None:
        with self._transaction() as cur:
            for state in batch.projections:
                self._write_projection(cur, state)
            for halt in batch.halts:
                self._write_halt(cur, halt)
            for snapshot in batch.snapshots:
                self._write_snapshot(cur, snapshot)
            for (topic, partition), offset in batch.offsets.items():
                self._write_offset(cur, topic, partition, offset)

    def halt(self, tenant_id: str, run_id: str, reason: str, coordinates: EventCoordinates) -> None:
        self.apply_batch(ProjectionBatch(halts=[Halt(tenant_id, run_id, reason, coordinates)]))

    def save_snapshot(self, snapshot: ProjectionSnapshot) -> None:
        self.apply_batch(ProjectionBatch(snapshots=[snapshot]))

    def _write_projection(self, cur: sqlite3.Cursor, state: RunProjection) -> None:
        cur.execute(
            sql.UPSERT_PROJECTION,
            (
                state.tenant_id,
                state.run_id,
                state.status,
                state.version,
                PROJECTOR_VERSION,
                state.to_json(),
            ),
        )
        if cur.rowcount == 0:
            row = cur.execute(sql.SELECT_FENCE, (state.tenant_id, state.run_id)).fetchone()
            why = "is halted" if row and row[0] else f"is at version {row[1] if row else '?'}"
            raise StoreConflict(
                f"projection {state.tenant_id}/{state.run_id} {why}; "
                f"refusing to write version {state.version}"
            )

    def _write_halt(self, cur: sqlite3.Cursor, halt: Halt) -> None:
        c = halt.coordinates
        cur.execute(
            sql.UPSERT_HALT,
            (
                halt.tenant_id,
                halt.run_id,
                PROJECTOR_VERSION,
                halt.reason,
                c.sequence,
                c.event_id,
                c.event_type,
                c.schema_version,
                c.topic,
                c.partition,
                c.offset,
            ),
        )

    def _write_snapshot(self, cur: sqlite3.Cursor, snapshot: ProjectionSnapshot) -> None:
        state = snapshot.state
        cur.execute(
            sql.UPSERT_SNAPSHOT,
            (
                state.tenant_id,
                state.run_id,
                snapshot.projector_version,
                snapshot.last_applied_sequence,
                state.to_json(),
            ),
        )

    def _write_offset(self, cur: sqlite3.Cursor, topic: str, partition: int, offset: int) -> None:
        cur.execute(sql.UPSERT_OFFSET, (topic, partition, offset))
        if cur.rowcount == 0:
            (stored,) = cur.execute(sql.SELECT_OFFSET, (topic, partition)).fetchone()
            raise StoreConflict(
                f"offset of {topic}[{partition}] is {stored}; refusing to move it back to {offset}"
            )

    # --- reads -------------------------------------------------------------------------------
    def _query(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(statement, params).fetchall()

    def get(self, tenant_id: str, run_id: str) -> StoredProjection | None:
        rows = self._query(sql.SELECT_ONE, (tenant_id, run_id))
        return sql.stored_row(rows[0]) if rows else None

    def list(
        self,
        status: str | None = None,
        tenant: str | None = None,
        *,
        halted: bool | None = None,
        limit: int | None = None,
    ) -> StoredList:
        statement, params = sql.list_statement(status, tenant, halted, limit)
        return [sql.stored_row(r) for r in self._query(statement, params)]

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        wanted = set(partitions)
        rows = self._query(sql.SELECT_OFFSETS, (topic,))
        return {int(p): int(o) for p, o in rows if p in wanted}

    def load_snapshot(self, tenant_id: str, run_id: str) -> ProjectionSnapshot | None:
        rows = self._query(sql.SELECT_SNAPSHOT, (tenant_id, run_id))
        return sql.stored_snapshot(tenant_id, run_id, rows[0]) if rows else None

    def close(self) -> None:
        with self._lock:
            self._db.close()
