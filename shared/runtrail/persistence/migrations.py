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

**How a store is opened** is the caller's to say, for every kind at once (:func:`opening`):

* ``"create"`` (the default, the services and every command that writes): a missing SQLite
  file is created and pending migrations are applied;
* ``"existing"`` (a command that writes into a store a service made, e.g. signing a tree head):
  the store must exist and hold every component already (an older version is migrated);
* ``"read"`` (a command that only reads): nothing is created, migrated or changed; the store
  must exist, hold every component at exactly the version this code knows, and is opened
  without a write lock. A store of another kind (its components are not these) is
  :class:`NotThisStore`, an older one :class:`StoreTooOld`, a newer one :class:`StoreTooNew`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

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


class MigrationError(ValueError):
    """The store's schema cannot be brought to what this code needs. A :class:`ValueError`:
    like a bad option, the store the caller was pointed at cannot be used (``runtrail run``
    reports it in one line, exit 2)."""


class StoreTooNew(MigrationError):
    """The store records a migration of a component newer than any this code knows."""


class StoreTooOld(MigrationError):
    """A store opened to read records an older version of a component: only a writer (its
    service) migrates a store."""


class NotThisStore(MigrationError):
    """The store holds not every component asked for: another kind of store, or no runtrail
    store at all."""


#: How a store's database is opened (see the module doc).
Opening = Literal["create", "existing", "read"]

_OPENING: ContextVar[Opening] = ContextVar("runtrail_store_opening", default="create")


@contextmanager
def opening(mode: Opening) -> Iterator[None]:
    """Every store database opened within is opened as ``mode`` says (any kind, any dialect:
    the adapters ask :func:`opening_mode` when they open)."""
    if mode not in ("create", "existing", "read"):
        raise ValueError(f"a store is opened to create, existing or read, not {mode!r}")
    token = _OPENING.set(mode)
    try:
        yield
    finally:
        _OPENING.reset(token)


def opening_mode() -> Opening:
    """How a database opened now is to be opened (``"create"`` unless :func:`opening` says)."""
    return _OPENING.get()


_TABLE_EXISTS: dict[str, str] = {
    "sqlite": "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
    "postgresql": "SELECT 1 WHERE to_regclass(%s) IS NOT NULL",
}


def recorded(
    query: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]], dialect: Dialect
) -> dict[str, int] | None:
    """Each component's recorded version, read without writing anything; None when the store
    has no migrations table (no runtrail store, or one older than the migrations)."""
    if not query(_TABLE_EXISTS[dialect], (TABLE,)):
        return None
    rows = query(f"SELECT component, MAX(version) FROM {TABLE} GROUP BY component", ())
    return {str(c): int(v) for c, v in rows}


def check(
    query: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]],
    dialect: Dialect,
    components: Sequence[Component],
    *,
    where: str = "the store",
    older: bool = False,
) -> None:
    """Raise unless the store holds every component (with ``older``, at any version up to this
    code's; without, at exactly this code's). Reads only."""
    found = recorded(query, dialect) or {}
    wanted = [c.name for c in components]
    missing = [name for name in wanted if name not in found]
    if missing:
        held = ", ".join(sorted(found)) or "no runtrail schema"
        raise NotThisStore(
            f"{where} holds no {', '.join(missing)} schema (it holds {held}): "
            "a store of another kind, or none yet"
        )
    for component in components:
        stored = found[component.name]
        if stored > component.latest:
            raise StoreTooNew(
                f"{where} records {component.name} schema version {stored}, newer than "
                f"{component.latest}, the newest this runtrail knows: upgrade runtrail "
                "(or open a store made by this version)"
            )
        if stored < component.latest and not older:
            raise StoreTooOld(
                f"{where} records {component.name} schema version {stored}, older than "
                f"{component.latest}: a reading command does not migrate it (start its service "
                "with this runtrail once)"
            )


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
    """A database just opened: it can be checked, migrated and must be closed."""

    def migrate(self, components: Sequence[Component]) -> dict[str, int]: ...

    def check(self, components: Sequence[Component], *, older: bool = False) -> None: ...

    def close(self) -> None: ...


def migrate_or_close(db: Migratable, components: Sequence[Component], mode: Opening) -> None:
    """Bring a database being opened to ``components``' schema as ``mode`` says (``"read"``:
    only check it is there; ``"existing"``: check it is there, then migrate; ``"create"``:
    migrate), closing it if that fails (e.g. :class:`StoreTooNew`): a store that is refused
    leaves no connection behind."""
    if not components:
        return
    try:
        if mode != "create":
            db.check(components, older=mode == "existing")
        if mode != "read":
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
