"""``open_projection_store(url)``: the store adapter a URL names (one module per adapter)."""

from __future__ import annotations

from runtrail.projection.store import ProjectionStore
from runtrail.projection.store_sqlite import SqliteProjectionStore, sqlite_path


def open_projection_store(url: str) -> ProjectionStore:
    """The store at ``url``: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``sqlite:///:memory:`` (``postgresql://`` is planned, with the same SQL)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a store URL: {url!r} (expected sqlite:///path.db)")
    if scheme == "sqlite":
        return SqliteProjectionStore(sqlite_path(rest))
    if scheme in ("postgresql", "postgres"):
        raise ValueError("the PostgreSQL projection store is not available yet; use sqlite:///")
    raise ValueError(f"unsupported projection store scheme {scheme!r} in {url!r}")
