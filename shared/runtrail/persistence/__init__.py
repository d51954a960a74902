"""The one persistence layer every store kind is built on.

One module per job:

* :mod:`.urls` — masking a store URL for logs, naming an SQLite file;
* :mod:`.url_options` — the options a store URL carries in its query string;
* :mod:`.kinds` — every store kind and its adapter per URL scheme, as data;
* :mod:`.registry` — opening any kind's store by URL (``open_store(kind, url)``);
* :mod:`.dialect` — the two SQL dialects, and the one placeholder conversion between them;
* :mod:`.sqlite` — the one SQLite connection configuration;
* :mod:`.postgres` — the one PostgreSQL connection management (a health-checked pool);
* :mod:`.tracking` — the one table of consumed positions, fenced: positions never move back;
* :mod:`.migrations` — numbered schema migrations per component, recorded in the store;
* :mod:`.object_store` — object storage (obstore) for capture records, session blobs and
  protected content.

Each store kind keeps its own interface (e.g. :mod:`runtrail.projection.store`), implemented
once per adapter module (``store_sqlite``, ``store_postgres``) on these parts.
"""

from runtrail.persistence.kinds import (
    AUDIT_LINKS,
    CAPTURE_RECORDS,
    COMMAND_EVENTS,
    DATA_KEYS,
    LANGGRAPH_CHECKPOINTS,
    PROJECTIONS,
    PROTECTED_CONTENT,
    RESUME_ENTRIES,
    SESSION_SNAPSHOTS,
    StoreKind,
)
from runtrail.persistence.registry import UnsupportedStoreUrl, open_store
from runtrail.persistence.urls import redact_url, sqlite_url

__all__ = [
    "AUDIT_LINKS",
    "CAPTURE_RECORDS",
    "COMMAND_EVENTS",
    "DATA_KEYS",
    "LANGGRAPH_CHECKPOINTS",
    "PROJECTIONS",
    "PROTECTED_CONTENT",
    "RESUME_ENTRIES",
    "SESSION_SNAPSHOTS",
    "StoreKind",
    "UnsupportedStoreUrl",
    "open_store",
    "redact_url",
    "sqlite_url",
]
