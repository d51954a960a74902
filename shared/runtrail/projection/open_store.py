"""``open_projection_store(url)``: the store adapter a URL names (one module per adapter).

``sqlite://`` opens :class:`~runtrail.projection.store_sqlite.SqliteProjectionStore` (the
embedded default); ``postgresql://`` and ``postgres://`` open
:class:`~runtrail.projection.store_postgres.PostgresProjectionStore` (psycopg is imported only
then). Both run the same SQL (``store_sql``) with the same fences, and return the same rows.
"""

from __future__ import annotations

from runtrail.projection.store import ProjectionStore
from runtrail.projection.store_sqlite import SqliteProjectionStore, sqlite_path


def open_projection_store(url: str) -> ProjectionStore:
    """The store at ``url``: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``sqlite:///:memory:``, or ``postgresql://user:password@host:port/database`` (also
    ``postgres://``; any libpq URL, e.g. with ``?sslmode=require``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(
            f"not a store URL: {url!r} (expected sqlite:///path.db or postgresql://host/db)"
        )
    if scheme == "sqlite":
        return SqliteProjectionStore(sqlite_path(rest))
    if scheme in ("postgresql", "postgres"):
        from runtrail.projection.store_postgres import PostgresProjectionStore

        return PostgresProjectionStore(url)
    raise ValueError(f"unsupported projection store scheme {scheme!r} in {url!r}")
