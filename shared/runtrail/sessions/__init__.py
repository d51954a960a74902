"""Session snapshots and stores (seed 000 §4): survive restarts, resume long sessions.

:class:`AgentSession` is rebuilt from a session's events and can :meth:`~AgentSession.snapshot`
and :meth:`~AgentSession.restore`; :class:`AgentSessionSnapshot` is sealed by a digest of its
canonical bytes; ``open_store(SESSION_SNAPSHOTS, url)`` (:mod:`runtrail.persistence`) opens the store a URL names (``file:///dir``,
``postgresql://…``). Object storage for large snapshots (:mod:`.blobs`), the sessions-topic
pointer (:mod:`.pointer`) and the restore from the topic (:mod:`.restore`) are imported on
their own, so the file store needs nothing but the filesystem.

Each name below is imported from its module on first use (:mod:`runtrail.lazy_exports`): a
reader of one part (the snapshot format, the errors) does not load the session model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.sessions.errors import CorruptSnapshot, SessionStoreError, UntrustedSnapshot
    from runtrail.sessions.session import AgentSession
    from runtrail.sessions.snapshot import (
        CODE_VERSION,
        SNAPSHOT_FORMAT,
        AgentSessionSnapshot,
        MemorySource,
        parse_snapshot,
        seal,
    )
    from runtrail.sessions.store import AgentSessionStore, SessionSummary

__getattr__ = lazy_exports(
    __name__,
    {
        ".errors": ("CorruptSnapshot", "SessionStoreError", "UntrustedSnapshot"),
        ".session": ("AgentSession",),
        ".snapshot": (
            "CODE_VERSION",
            "SNAPSHOT_FORMAT",
            "AgentSessionSnapshot",
            "MemorySource",
            "parse_snapshot",
            "seal",
        ),
        ".store": ("AgentSessionStore", "SessionSummary"),
    },
)

__all__ = [
    "CODE_VERSION",
    "SNAPSHOT_FORMAT",
    "AgentSession",
    "AgentSessionSnapshot",
    "AgentSessionStore",
    "CorruptSnapshot",
    "MemorySource",
    "SessionStoreError",
    "SessionSummary",
    "UntrustedSnapshot",
    "parse_snapshot",
    "seal",
]
