"""``open_projection_store(url)``: the projection store a URL names, through the one registry.

Kept as a name for the tests and benchmarks that use it (runtrail's own code calls the
registry); it is exactly
``open_store(PROJECTIONS, url)`` (:mod:`runtrail.persistence.registry`). The adapters are
:mod:`~runtrail.projection.store_sqlite` (``sqlite://``, ``memory://``) and
:mod:`~runtrail.projection.store_postgres` (``postgresql://``, ``postgres://``; psycopg is
imported only when one is opened). Both run the same SQL (``store_sql``) with the same fences.
"""

from __future__ import annotations

from runtrail.persistence.kinds import PROJECTIONS
from runtrail.persistence.registry import open_store
from runtrail.projection.store import ProjectionStore


def open_projection_store(url: str) -> ProjectionStore:
    """The store at ``url``: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``sqlite:///:memory:``, ``memory://``, or ``postgresql://user:password@host:port/database``
    (also ``postgres://``; any libpq URL, e.g. with ``?sslmode=require``)."""
    return open_store(PROJECTIONS, url)
