"""One store of each dialect for the persistence tests: SQLite in a folder, a fresh
PostgreSQL database; ``open()`` gives another handle on the same store (another process)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runtrail.persistence.postgres import PostgresDatabase
from runtrail.persistence.sqlite import SqliteDatabase

Database = SqliteDatabase | PostgresDatabase


@dataclass
class Backend:
    dialect: str
    target: str
    opened: list[Database] = field(default_factory=list)

    def open(self) -> Database:
        db: Database = (
            SqliteDatabase(self.target)
            if self.dialect == "sqlite"
            else PostgresDatabase(self.target, what="test store")
        )
        self.opened.append(db)
        return db

    def close(self) -> None:
        for db in self.opened:
            db.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        made = Backend("sqlite", str(tmp_path / "store.db"))
    else:
        made = Backend("postgresql", request.getfixturevalue("postgres_url"))
    yield made
    made.close()
