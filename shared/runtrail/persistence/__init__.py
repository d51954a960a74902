"""The one persistence layer every store kind is built on.

One module per job:

* :mod:`.urls` — masking a store URL for logs, naming an SQLite file;
* :mod:`.registry` — URL scheme → adapter, for every store kind (:mod:`.kinds` lists them);
* :mod:`.sqlite` — the one SQLite connection configuration;
* :mod:`.postgres` — the one PostgreSQL connection management (a health-checked pool);
* :mod:`.tracking` — the one table of consumed positions, fenced: positions never move back;
* :mod:`.migrations` — numbered schema migrations per component, recorded in the store.

Each store kind keeps its own interface (e.g. :mod:`runtrail.projection.store`), implemented
once per adapter module (``store_sqlite``, ``store_postgres``) on these parts.
"""

from runtrail.persistence import kinds  # noqa: F401  (defines the kinds a string may name)
from runtrail.persistence.registry import StoreKind, UnsupportedStoreUrl, open_store, register
from runtrail.persistence.urls import redact_url, sqlite_url

__all__ = [
    "StoreKind",
    "UnsupportedStoreUrl",
    "open_store",
    "redact_url",
    "register",
    "sqlite_url",
]
