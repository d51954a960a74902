"""Interim adapters: the store kinds not yet ported onto this layer, opened by their wave-1
openers, so every kind is already opened through the one registry.

Each block goes away when its kind gets its own adapter modules (listed in ``kinds``).
"""

from __future__ import annotations

from typing import Any

from runtrail.persistence import kinds
from runtrail.persistence.registry import register


def _resume(url: str, **options: Any) -> Any:
    from runtrail.resume.store import open_store

    return open_store(url, **options)


def _sessions(url: str, **options: Any) -> Any:
    from runtrail.sessions.store import open_session_store

    return open_session_store(url, **options)


def _checkpoints(url: str, **options: Any) -> Any:
    from runtrail.sessions.checkpoints import open_checkpoint_backend

    return open_checkpoint_backend(url, **options)


def _capture(url: str, **options: Any) -> Any:
    from runtrail.capture.sink import open_sink

    return open_sink(url, **options)


register(kinds.RESUME_ENTRIES, ("sqlite", "postgresql", "postgres"), _resume)
register(kinds.SESSION_SNAPSHOTS, ("file", "postgresql", "postgres"), _sessions)
register(kinds.LANGGRAPH_CHECKPOINTS, ("file", "postgresql", "postgres"), _checkpoints)
register(kinds.CAPTURE_RECORDS, ("memory", "file", *kinds.OBJECT_STORE_SCHEMES), _capture)
