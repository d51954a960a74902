"""The SQLite projection store: the embedded default (``sqlite:///path.db``).

One connection in autocommit mode; every write is an explicit ``BEGIN IMMEDIATE`` … ``COMMIT``,
so a batch is all or nothing. WAL lets ``runtrail projection show`` read while the service
writes. ``synchronous=NORMAL`` is safe here: a power cut can lose only whole last transactions,
and since offsets commit with the rows they cover, the lost events are simply consumed again.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runtrail.files import open_private, private_dir
from runtrail.persistence.kinds import PROJECTIONS
from runtrail.persistence.registry import register
from runtrail.persistence.urls import scheme_of
from runtrail.projection import store_sql as sql
from runtrail.projection.snapshot import ProjectionSnapshot
from runtrail.projection.store import (
    EventCoordinates,
    Halt,
    ProjectionBatch,
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
        self._writer = sql.BatchWriter()
        if target != MEMORY:
            private_dir(Path(target).parent)
            open_private(target, "a").close()  # 0600 before SQLite creates it (and its WAL)
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
                self._writer.projection(cur, state)
            for halt in batch.halts:
                self._writer.halt(cur, halt)
            for snapshot in batch.snapshots:
                self._writer.snapshot(cur, snapshot)
            for (topic, partition), offset in batch.offsets.items():
                self._writer.offset(cur, topic, partition, offset)

    def rewind_offsets(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets, back or forward, past the fence (``runtrail offsets set``)."""
        with self._transaction() as cur:
            cur.executemany(sql.SET_OFFSET, [(topic, p, o) for p, o in offsets.items()])

    def halt(self, tenant_id: str, run_id: str, reason: str, coordinates: EventCoordinates) -> None:
        self.apply_batch(ProjectionBatch(halts=[Halt(tenant_id, run_id, reason, coordinates)]))

    def save_snapshot(self, snapshot: ProjectionSnapshot) -> None:
        self.apply_batch(ProjectionBatch(snapshots=[snapshot]))

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
        run_id: str | None = None,
    ) -> StoredList:
        statement, params = sql.list_statement(status, tenant, halted, limit, run_id=run_id)
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


def open_url(url: str) -> SqliteProjectionStore:
    """The store of ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``memory://``."""
    if scheme_of(url) == "memory":
        return SqliteProjectionStore(MEMORY)
    return SqliteProjectionStore(sqlite_path(url.partition("://")[2]))


register(PROJECTIONS, ("sqlite", "memory"), open_url)
