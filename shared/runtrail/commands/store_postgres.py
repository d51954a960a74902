"""The production command store: ``postgresql://…`` (or ``postgres://…``)."""

from __future__ import annotations

from typing import Any

from runtrail.commands.store import EventStore
from runtrail.persistence.postgres import PostgresDatabase


def open_url(url: str, *, pool_size: int = 8, **options: Any) -> EventStore:
    return EventStore(
        PostgresDatabase(url, what="command event store", max_size=pool_size), **options
    )
