"""The embedded command store: ``sqlite:///path.db`` (the local stack's default)."""

from __future__ import annotations

from typing import Any

from runtrail.commands.store import EventStore
from runtrail.persistence.kinds import COMMAND_EVENTS
from runtrail.persistence.registry import register
from runtrail.persistence.sqlite import SqliteDatabase
from runtrail.persistence.urls import sqlite_path


def open_url(url: str, **options: Any) -> EventStore:
    return EventStore(SqliteDatabase(sqlite_path(url), synchronous="FULL"), **options)


register(COMMAND_EVENTS, ("sqlite",), open_url)
