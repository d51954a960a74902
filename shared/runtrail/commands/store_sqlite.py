"""The embedded command store: ``sqlite:///path.db`` (the local stack's default)."""

from __future__ import annotations

from typing import Any

from runtrail.commands.store import EventStore
from runtrail.persistence.sqlite import SqliteDatabase
from runtrail.persistence.urls import sqlite_path


def open_url(url: str, **options: Any) -> EventStore:
    return EventStore(SqliteDatabase(sqlite_path(url), synchronous="FULL"), **options)
