"""The PostgreSQL resume-cache store: ``postgresql://…`` (or ``postgres://…``).

Several service instances share one database; the connections come from the one pool
(:mod:`runtrail.persistence.postgres`: health-checked, replaced when the server dropped them,
a server that is away raises ``StoreUnavailable``). The pool holds the consume loop's writer
plus ``readers`` connections for the lookups.
"""

from __future__ import annotations

from runtrail.persistence.postgres import PostgresDatabase
from runtrail.resume.store_sql import SqlCacheStore


def open_postgres(url: str, *, readers: int = 8) -> SqlCacheStore:
    """The store at ``url``; up to ``readers`` lookups run at once beside the writer."""
    db = PostgresDatabase(url, what="resume-cache store", max_size=max(1, readers) + 1)
    try:
        return SqlCacheStore(db)
    except BaseException:
        db.close()
        raise
