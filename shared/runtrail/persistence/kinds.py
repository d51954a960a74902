"""Every kind of store runtrail keeps, and which adapter opens each URL scheme: data, not code.

Why a table: a newcomer finds any store adapter from here in one hop, and
:func:`~runtrail.persistence.registry.open_store` imports only the adapter of the scheme it is
asked for (so a process that never opens a PostgreSQL store never imports psycopg). An opener is
``"module:attribute"``; the attribute may be dotted (``Class.from_url``) and is called with the
URL and the caller's options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from runtrail.persistence.urls import OBJECT_STORE_SCHEMES

if TYPE_CHECKING:
    from runtrail.audit.store import LinkStore
    from runtrail.audit.tile_store import TileStore
    from runtrail.capture.sink import CaptureSink
    from runtrail.commands.store import EventStore
    from runtrail.drops.store import SqlDropStore
    from runtrail.privacy.content_store import ContentStore
    from runtrail.privacy.keys import KeyStore
    from runtrail.privacy.prune_log import SqlPruneLog
    from runtrail.projection.store import ProjectionStore
    from runtrail.resume.store import CacheStore
    from runtrail.sessions.checkpoints import CheckpointBackend
    from runtrail.sessions.store import AgentSessionStore

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoreKind(Generic[T]):
    """A kind of store: its name, how errors call it, and its opener per URL scheme."""

    name: str
    label: str
    openers: Mapping[str, str]


def _postgres(opener: str) -> dict[str, str]:
    return {"postgresql": opener, "postgres": opener}


PROJECTIONS: StoreKind[ProjectionStore] = StoreKind(
    "projection",
    "projection store",
    {
        "sqlite": "runtrail.projection.store_sqlite:SqliteProjectionStore.from_url",
        "memory": "runtrail.projection.store_sqlite:SqliteProjectionStore.from_url",
        **_postgres("runtrail.projection.store_postgres:PostgresProjectionStore"),
    },
)
AUDIT_LINKS: StoreKind[LinkStore] = StoreKind(
    "audit",
    "audit store",
    {
        "sqlite": "runtrail.audit.store_sqlite:SqliteLinkStore.from_url",
        "memory": "runtrail.audit.store_sqlite:SqliteLinkStore.from_url",
        **_postgres("runtrail.audit.store_postgres:PostgresLinkStore.from_url"),
    },
)
AUDIT_TILES: StoreKind[TileStore] = StoreKind(
    "audit-tiles",
    "audit tile store",
    {
        "file": "runtrail.audit.tile_store:FileTileStore.from_url",
        **dict.fromkeys(
            OBJECT_STORE_SCHEMES, "runtrail.audit.tile_store_object:ObjectTileStore.from_url"
        ),
    },
)
COMMAND_EVENTS: StoreKind[EventStore] = StoreKind(
    "commands",
    "command event store",
    {
        "sqlite": "runtrail.commands.store_sqlite:open_url",
        **_postgres("runtrail.commands.store_postgres:open_url"),
    },
)
RESUME_ENTRIES: StoreKind[CacheStore] = StoreKind(
    "resume-cache",
    "resume-cache store",
    {
        "sqlite": "runtrail.resume.store_sqlite:open_sqlite",
        **_postgres("runtrail.resume.store_postgres:open_postgres"),
    },
)
SESSION_SNAPSHOTS: StoreKind[AgentSessionStore] = StoreKind(
    "sessions",
    "session store",
    {
        "file": "runtrail.sessions.store_file:FileSessionStore.from_url",
        **_postgres("runtrail.sessions.store_postgres:PostgresSessionStore"),
    },
)
LANGGRAPH_CHECKPOINTS: StoreKind[CheckpointBackend] = StoreKind(
    "checkpoints",
    "LangGraph checkpoint store",
    {
        "file": "runtrail.sessions.checkpoints_file:FileCheckpointBackend.from_url",
        **_postgres("runtrail.sessions.checkpoints_postgres:PostgresCheckpointBackend"),
    },
)
CAPTURE_RECORDS: StoreKind[CaptureSink] = StoreKind(
    "capture",
    "capture sink",
    {
        "memory": "runtrail.capture.memory_sink:open_url",
        "file": "runtrail.capture.file_sink:JsonlFileSink.from_url",
        **dict.fromkeys(
            OBJECT_STORE_SCHEMES, "runtrail.capture.object_sink:ObjectStoreSink.from_url"
        ),
    },
)
PROTECTED_CONTENT: StoreKind[ContentStore] = StoreKind(
    "content",
    "content store",
    {
        "file": "runtrail.privacy.content_file:FileContentStore.from_url",
        **_postgres("runtrail.privacy.content_postgres:PostgresContentStore.from_url"),
        **dict.fromkeys(
            OBJECT_STORE_SCHEMES, "runtrail.privacy.content_object:ObjectContentStore.from_url"
        ),
    },
)
DATA_KEYS: StoreKind[KeyStore] = StoreKind(
    "keys",
    "key store",
    {"file": "runtrail.privacy.keys_file:FileKeyStore.from_url"},
)
OTLP_DROPS: StoreKind[SqlDropStore] = StoreKind(
    "otlp-drops",
    "OTLP drops store",
    {
        "sqlite": "runtrail.drops.store:open_url",
        **_postgres("runtrail.drops.store:open_url"),
    },
)
PRUNE_LOG: StoreKind[SqlPruneLog] = StoreKind(
    "prune-log",
    "prune log",
    {
        "sqlite": "runtrail.privacy.prune_log:open_url",
        **_postgres("runtrail.privacy.prune_log:open_url"),
    },
)

#: Every kind by name, for callers that name a kind by string (``open_store("projection", …)``).
KINDS: Mapping[str, StoreKind[Any]] = {
    kind.name: kind
    for kind in (
        PROJECTIONS,
        AUDIT_LINKS,
        AUDIT_TILES,
        COMMAND_EVENTS,
        RESUME_ENTRIES,
        SESSION_SNAPSHOTS,
        LANGGRAPH_CHECKPOINTS,
        CAPTURE_RECORDS,
        PROTECTED_CONTENT,
        DATA_KEYS,
        OTLP_DROPS,
        PRUNE_LOG,
    )
}
