"""The SQLite projection store: the embedded default (``sqlite:///path.db``).

On :mod:`runtrail.persistence.sqlite` (the one SQLite configuration: WAL, so
``runtrail projection show`` reads while the service writes; ``BEGIN IMMEDIATE`` … ``COMMIT``
per batch, so a batch is all or nothing). ``synchronous=NORMAL`` is safe here: a power cut can
lose only whole last transactions, and since offsets commit with the rows they cover, the lost
events are simply consumed again.

URLs: ``sqlite:///relative.db`` (in the working folder), ``sqlite:////absolute.db``,
``sqlite:///:memory:`` or ``memory://``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from runtrail.persistence.sqlite import SqliteDatabase
from runtrail.persistence.tracking import TRACKING
from runtrail.persistence.urls import MEMORY, scheme_of, sqlite_path
from runtrail.projection import store_sql as sql
from runtrail.projection.snapshot import ProjectionSnapshot
from runtrail.projection.store import (
    EventCoordinates,
    Halt,
    ProjectionBatch,
    StoredList,
    StoredProjection,
)


def path_of(url: str) -> str:
    """The database file a projection store URL names (``sqlite:///x.db`` is relative)."""
    if scheme_of(url) == "memory":
        return MEMORY
    return sqlite_path(url, three_slashes="relative")


class SqliteProjectionStore:
    """:class:`~runtrail.projection.store.ProjectionStore` on one SQLite database file."""

    def __init__(self, path: str | Path) -> None:
        self._db = SqliteDatabase(path, components=[TRACKING, sql.PROJECTION])
        self._writer = sql.BatchWriter("sqlite")
        #: A URL that opens this database again in another process (a parallel rebuild's
        #: workers); None for an in-memory one, which no other connection can reach.
        self.url: str | None = None if str(path) == MEMORY else f"sqlite:///{Path(path).resolve()}"

    @classmethod
    def from_url(cls, url: str) -> SqliteProjectionStore:
        return cls(path_of(url))

    # --- writes ------------------------------------------------------------------------------
    def apply_batch(self, batch: ProjectionBatch) -> None:
        with self._db.transaction() as cur:
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
        with self._db.transaction() as cur:
            self._writer.tracking.rewind(cur, topic, offsets)

    def halt(self, tenant_id: str, run_id: str, reason: str, coordinates: EventCoordinates) -> None:
        self.apply_batch(ProjectionBatch(halts=[Halt(tenant_id, run_id, reason, coordinates)]))

    def save_snapshot(self, snapshot: ProjectionSnapshot) -> None:
        self.apply_batch(ProjectionBatch(snapshots=[snapshot]))

    # --- reads -------------------------------------------------------------------------------
    def get(self, tenant_id: str, run_id: str) -> StoredProjection | None:
        rows = self._db.query(sql.SELECT_ONE, (tenant_id, run_id))
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
            status, tenant, halted, limit, run_id=run_id, after=after
        )
        return [sql.stored_row(r) for r in self._db.query(statement, params)]

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.locked() as conn:
            return self._writer.tracking.read(conn, topic, partitions)

    def load_snapshot(self, tenant_id: str, run_id: str) -> ProjectionSnapshot | None:
        rows = self._db.query(sql.SELECT_SNAPSHOT, (tenant_id, run_id))
        return sql.stored_snapshot(tenant_id, run_id, rows[0]) if rows else None

    def close(self) -> None:
        self._db.close()
