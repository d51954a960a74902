"""Every kind of store runtrail keeps, and the modules whose adapters open it.

Why one list: a newcomer finds any store adapter from here in one hop, and
:func:`~runtrail.persistence.registry.open_store` imports only the adapters of the kind it is
asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.persistence.registry import StoreKind, define_kind

if TYPE_CHECKING:
    from runtrail.audit.store import LinkStore
    from runtrail.capture.sink import CaptureSink
    from runtrail.commands.store import EventStore
    from runtrail.projection.store import ProjectionStore
    from runtrail.resume.store import CacheStore
    from runtrail.sessions.checkpoints import CheckpointBackend
    from runtrail.sessions.store import AgentSessionStore

PROJECTIONS: StoreKind[ProjectionStore] = define_kind(
    "projection",
    "projection store",
    ("runtrail.projection.store_sqlite", "runtrail.projection.store_postgres"),
)
AUDIT_LINKS: StoreKind[LinkStore] = define_kind(
    "audit",
    "audit store",
    ("runtrail.audit.store_sqlite", "runtrail.audit.store_postgres"),
)
COMMAND_EVENTS: StoreKind[EventStore] = define_kind(
    "commands",
    "command event store",
    ("runtrail.commands.store_sqlite", "runtrail.commands.store_postgres"),
)
RESUME_ENTRIES: StoreKind[CacheStore] = define_kind(
    "resume-cache",
    "resume-cache store",
    ("runtrail.resume.store_sqlite", "runtrail.resume.store_postgres"),
)
SESSION_SNAPSHOTS: StoreKind[AgentSessionStore] = define_kind(
    "sessions",
    "session store",
    ("runtrail.sessions.store_file", "runtrail.sessions.store_postgres"),
)
LANGGRAPH_CHECKPOINTS: StoreKind[CheckpointBackend] = define_kind(
    "checkpoints",
    "checkpoint store",
    ("runtrail.sessions.checkpoints_file", "runtrail.sessions.checkpoints_postgres"),
)
CAPTURE_RECORDS: StoreKind[CaptureSink] = define_kind(
    "capture",
    "capture sink",
    (
        "runtrail.capture.memory_sink",
        "runtrail.capture.file_sink",
        "runtrail.capture.object_sink",
    ),
)
