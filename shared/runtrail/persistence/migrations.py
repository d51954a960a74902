"""Numbered schema migrations per component, applied when a store opens, recorded in it.

Why: ``CREATE TABLE IF NOT EXISTS`` at every start cannot change a table, and cannot tell a
store written by newer code. Now each component (``projection``, ``audit``…) lists its
migrations, numbered from 1; :func:`migrate` applies those the store has not recorded, in
order, and records each in ``runtrail_migrations`` (component, version, name, applied_at):

* all in **one transaction**, serialised against other processes opening the store at the
  same time: ``BEGIN IMMEDIATE`` on SQLite, a transaction-scoped advisory lock on PostgreSQL;
  the second opener waits, then finds everything applied;
* a store whose recorded version of a component is **newer than the code knows** is refused
  with :class:`StoreTooNew` (old code must not write a schema it does not understand);
* **migration 1** of each component is its first schema (``IF NOT EXISTS`` only there), so
  a store whose tables predate the migrations table is adopted as it is, rows kept; later
  migrations change it (e.g. move the old offset table into the tracking table).

A migration's steps are SQL statements, or a function given the transaction's cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from runtrail.persistence.dialect import Dialect, placeholders

TABLE = "runtrail_migrations"

#: The advisory lock every PostgreSQL migration run takes ("rtmigrat" in ASCII).
PG_LOCK = 0x72746D6967726174

_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    component TEXT NOT NULL,
    version INTEGER NOT NULL,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    PRIMARY KEY (component, version))"""


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered schema change: SQL statements, or a function of the cursor."""

    version: int
    name: str
    steps: Sequence[str] | Callable[[Any], None]

    def run(self, cur: Any) -> None:
        if callable(self.steps):
            self.steps(cur)
            return
        for statement in self.steps:
            cur.execute(statement)


@dataclass(frozen=True, slots=True)
class Component:
    """A component's name and its migrations (versions 1, 2, … in order)."""

    name: str
    migrations: Sequence[Migration]

    def __post_init__(self) -> None:
        versions = [m.version for m in self.migrations]
        if versions != list(range(1, len(versions) + 1)):
            raise ValueError(f"{self.name}: migrations must be numbered 1, 2, … ({versions})")

    @property
    def latest(self) -> int:
        return len(self.migrations)


class MigrationError(Exception):
    """The store's schema cannot be brought to what this code needs."""


class StoreTooNew(MigrationError):
    """The store records a migration of a component newer than any this code knows."""


def migrate(
    transaction: Callable[[], AbstractContextManager[Any]],
    dialect: Dialect,
    components: Sequence[Component],
    *,
    where: str = "the store",
) -> dict[str, int]:
    """Bring ``components`` up to date in one ``transaction()`` (whose cursor or connection
    executes statements); returns each component's version before the run."""
    select_version = placeholders(f"SELECT MAX(version) FROM {TABLE} WHERE component = ?", dialect)
    record = placeholders(
        f"INSERT INTO {TABLE} (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
        dialect,
    )
    with transaction() as cur:
        if dialect == "postgresql":
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))
        cur.execute(_CREATE)
        before: dict[str, int] = {}
        for component in components:
            row = cur.execute(select_version, (component.name,)).fetchone()
            stored = int(row[0]) if row and row[0] is not None else 0
            before[component.name] = stored
            if stored > component.latest:
                raise StoreTooNew(
                    f"{where} records {component.name} schema version {stored}, newer than "
                    f"{component.latest}, the newest this runtrail knows: upgrade runtrail "
                    "(or open a store made by this version)"
                )
            for migration in component.migrations[stored:]:
                migration.run(cur)
                cur.execute(
                    record,
                    (
                        component.name,
                        migration.version,
                        migration.name,
                        datetime.now(UTC).isoformat(),
                    ),
                )
    return before


class Migratable(Protocol):
    """A database just opened: it can be migrated and must be closed."""

    def migrate(self, components: Sequence[Component]) -> dict[str, int]: ...

    def close(self) -> None: ...


def migrate_or_close(db: Migratable, components: Sequence[Component]) -> None:
    """Apply ``components``' pending migrations to a database being opened, closing it if they
    fail (e.g. :class:`StoreTooNew`): a store that is refused leaves no connection behind."""
    if not components:
        return
    try:
        db.migrate(components)
    except BaseException:
        db.close()
        raise


def applied(cur: Any) -> Iterator[tuple[str, int, str]]:
    """(component, version, name) of every recorded migration, in order (for diagnostics)."""
    yield from (
        (str(c), int(v), str(n))
        for c, v, n in cur.execute(
            f"SELECT component, version, name FROM {TABLE} ORDER BY component, version"
        ).fetchall()
    )
