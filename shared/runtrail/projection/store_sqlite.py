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

from collections.abc import Iterable
from pathlib import Path

from runtrail.persistence.sqlite import SqliteDatabase
from runtrail.persistence.tracking import TRACKING
from runtrail.persistence.urls import MEMORY, scheme_of, sqlite_path
from runtrail.projection import store_sql as sql


def path_of(url: str) -> str:
    """The database file a projection store URL names (``sqlite:///x.db`` is relative)."""
    if scheme_of(url) == "memory":
        return MEMORY
    return sqlite_path(url, three_slashes="relative")


class SqliteProjectionStore(sql.SqlProjectionStore):
    """:class:`~runtrail.projection.store.ProjectionStore` on one SQLite database file
    (``BEGIN IMMEDIATE`` serialises writers: no locks of its own)."""

    _db: SqliteDatabase

    def __init__(self, path: str | Path) -> None:
        super().__init__(SqliteDatabase(path, components=[TRACKING, sql.PROJECTION]))
        #: A URL that opens this database again in another process (a parallel rebuild's
        #: workers); None for an in-memory one, which no other connection can reach.
        self.url: str | None = None if str(path) == MEMORY else f"sqlite:///{Path(path).resolve()}"

    @classmethod
    def from_url(cls, url: str) -> SqliteProjectionStore:
        return cls(path_of(url))

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        with self._db.locked() as conn:
            return self._writer.tracking.read(conn, topic, partitions)
