"""The one opener of a store's database from its URL, for the stores many processes share.

Apart from :mod:`.dialect` because it builds the databases of both dialects, whose modules
import that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from runtrail.persistence.dialect import Database
from runtrail.persistence.urls import scheme_of, sqlite_path

if TYPE_CHECKING:
    from runtrail.persistence.migrations import Component


def open_database(
    url: str, *, what: str, components: Sequence[Component], max_size: int = 2
) -> Database:
    """The database of a store that many processes share, its ``components`` migrated (and
    closed again if they fail, so a refused store leaves no connection behind):
    ``sqlite:///abs/path.db`` for the processes of one host, ``postgresql://…`` (a pool of
    ``max_size``, named ``what`` in its errors) for any number of hosts."""
    if scheme_of(url) == "sqlite":
        from runtrail.persistence.sqlite import SqliteDatabase

        return SqliteDatabase(sqlite_path(url, three_slashes="absolute"), components=components)
    from runtrail.persistence.postgres import PostgresDatabase

    return PostgresDatabase(url, what=what, max_size=max_size, components=components)
