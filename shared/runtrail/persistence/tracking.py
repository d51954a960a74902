"""The one tracking table: where each component's consumed positions are kept.

Why: three offset tables had three fences. Now one table, ``runtrail_positions``
(component, topic, partition → next offset to consume), the same on SQLite and PostgreSQL,
with one rule:

* :meth:`Tracking.record` is written **in the same transaction as the rows** the positions
  cover, so after a crash the store holds both or neither;
* **positions never move back**: recording a position lower than the stored one is
  *refused* — :class:`PositionRegressed` is raised, the caller's transaction rolls back, and
  the component stops (a consumer that lost its partitions cannot undo the new owner's work
  silently). Recording the stored position again is a no-op;
* a rewind is explicit: :meth:`Tracking.rewind` sets positions back or forward, for the
  operator (``runtrail offsets set``) and replay paths, never for a service's own writes.

The statements are written once and take each ``dialect``'s placeholders
(:func:`~runtrail.persistence.dialect.placeholders`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runtrail.persistence.dialect import Dialect, placeholders
from runtrail.persistence.migrations import Component, Migration

TABLE = "runtrail_positions"

#: The tracking table's own migrations (component ``tracking``), applied before any
#: component's by :func:`runtrail.persistence.migrations.migrate`.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "create the tracking table",
        (
            f"""CREATE TABLE {TABLE} (
                component TEXT NOT NULL,
                topic TEXT NOT NULL,
                partition INTEGER NOT NULL,
                next_offset BIGINT NOT NULL,
                PRIMARY KEY (component, topic, partition))""",
        ),
    ),
)

TRACKING = Component("tracking", MIGRATIONS)

_UPSERT = f"""INSERT INTO {TABLE} (component, topic, partition, next_offset) VALUES (?, ?, ?, ?)
ON CONFLICT (component, topic, partition) DO UPDATE SET next_offset = excluded.next_offset"""
_FENCED = f"{_UPSERT}\nWHERE {TABLE}.next_offset <= excluded.next_offset"
_SELECT = f"SELECT partition, next_offset FROM {TABLE} WHERE component = ? AND topic = ?"
_SELECT_ONE = f"{_SELECT} AND partition = ?"
_SELECT_ALL = f"SELECT topic, partition, next_offset FROM {TABLE} WHERE component = ?"


class PositionRegressed(Exception):
    """A recorded position is lower than the stored one: refused (see the module docstring)."""

    def __init__(self, component: str, topic: str, partition: int, stored: int, offered: int):
        super().__init__(
            f"{component}: offset of {topic}[{partition}] is {stored}; "
            f"refusing to move it back to {offered}"
        )
        self.component = component
        self.topic = topic
        self.partition = partition
        self.stored = stored
        self.offered = offered


class Tracking:
    """One component's positions in the tracking table; every call takes the caller's cursor
    (or autocommit connection), so positions share the caller's transaction."""

    def __init__(self, component: str, dialect: Dialect) -> None:
        self.component = component
        self.dialect = dialect
        self._upsert = placeholders(_UPSERT, dialect)
        self._fenced = placeholders(_FENCED, dialect)
        self._select = placeholders(_SELECT, dialect)
        self._select_one = placeholders(_SELECT_ONE, dialect)
        self._select_all = placeholders(_SELECT_ALL, dialect)

    def record(self, cur: Any, positions: Mapping[tuple[str, int], int]) -> None:
        """Store next offsets per (topic, partition), fenced; :class:`PositionRegressed` if one
        would move back (nothing after it is written; roll the transaction back)."""
        for (topic, partition), offset in sorted(positions.items()):
            cur.execute(self._fenced, (self.component, topic, partition, offset))
            if cur.rowcount == 0:
                row = cur.execute(self._select_one, (self.component, topic, partition)).fetchone()
                stored = int(row[1]) if row else -1
                raise PositionRegressed(self.component, topic, partition, stored, offset)

    def rewind(self, cur: Any, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets per partition, back or forward: the one write past the fence."""
        for partition, offset in sorted(offsets.items()):
            cur.execute(self._upsert, (self.component, topic, partition, offset))

    def read(self, cur: Any, topic: str, partitions: Iterable[int] | None = None) -> dict[int, int]:
        """Next offset per partition (all stored ones, or those of ``partitions`` stored)."""
        rows = cur.execute(self._select, (self.component, topic)).fetchall()
        found = {int(p): int(o) for p, o in rows}
        if partitions is None:
            return found
        wanted = set(partitions)
        return {p: o for p, o in found.items() if p in wanted}

    def read_all(self, cur: Any) -> dict[str, dict[int, int]]:
        """Every stored position of the component, by topic then partition."""
        out: dict[str, dict[int, int]] = {}
        for topic, partition, offset in cur.execute(self._select_all, (self.component,)):
            out.setdefault(str(topic), {})[int(partition)] = int(offset)
        return out


def offsets_into_tracking(component: str, old_table: str, partition_column: str) -> Migration:
    """Migration 2 of a store that kept its offsets in a table of its own (the layout before
    tracking): they move into the tracking table, their positions kept, and the old table is
    dropped so no code can keep writing it unnoticed."""
    return Migration(
        2,
        "offsets move into the tracking table",
        (
            f"INSERT INTO {TABLE} (component, topic, partition, next_offset) "
            f"SELECT '{component}', topic, {partition_column}, next_offset FROM {old_table}",
            f"DROP TABLE {old_table}",
        ),
    )
