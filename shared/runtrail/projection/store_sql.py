"""The projection store's SQL, portable between SQLite and PostgreSQL, and its row decoding.

Statements use ``?`` placeholders (sqlite3);
:func:`~runtrail.persistence.dialect.placeholders` rewrites one to ``%s`` (psycopg). Upserts use ``INSERT … ON CONFLICT … DO UPDATE … WHERE``, which both databases
support; the ``WHERE`` clauses are the store's fences. A fenced upsert that does not apply
reports ``rowcount == 0`` in both. State is stored as TEXT (the projection's JSON) in both, so
both adapters return exactly the same rows for the same writes.

The schema is the ``projection`` component's numbered migrations (:data:`PROJECTION`), applied
at open; consumed offsets live in the one tracking table (:mod:`runtrail.persistence.tracking`),
written in the batch's transaction and fenced there: an offset never moves back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from runtrail.persistence.dialect import Database, Dialect, placeholders
from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.tracking import PositionRegressed, Tracking, offsets_into_tracking
from runtrail.projection.model import RunProjection
from runtrail.projection.projector import PROJECTOR_VERSION
from runtrail.projection.snapshot import ProjectionSnapshot, open_sealed
from runtrail.projection.store import (
    EventCoordinates,
    Halt,
    ProjectionBatch,
    RunQuery,
    RunsFound,
    SortKey,
    StoreConflict,
    StoredList,
    StoredProjection,
)

#: The tables as the first release created them (migration 1 adopts a store it made as is).
FIRST_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS projections (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        status TEXT,
        version BIGINT NOT NULL,
        projector_version INTEGER NOT NULL,
        state TEXT,
        halted BOOLEAN NOT NULL DEFAULT FALSE,
        halt_reason TEXT,
        halt_sequence BIGINT,
        halt_event_id TEXT,
        halt_event_type TEXT,
        halt_schema_version INTEGER,
        halt_topic TEXT,
        halt_partition INTEGER,
        halt_offset BIGINT,
        PRIMARY KEY (tenant_id, run_id)
    )""",
    "CREATE INDEX IF NOT EXISTS projections_by_status ON projections (status, tenant_id, run_id)",
    """CREATE TABLE IF NOT EXISTS consumer_offsets (
        topic TEXT NOT NULL,
        partition_id INTEGER NOT NULL,
        next_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition_id)
    )""",
    """CREATE TABLE IF NOT EXISTS projection_snapshots (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        projector_version INTEGER NOT NULL,
        last_applied_sequence BIGINT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (tenant_id, run_id)
    )""",
)

#: Columns a runs page filters and orders on, copied from the state at every write.
RUN_INDEX_COLUMNS: tuple[str, ...] = (
    "ALTER TABLE projections ADD COLUMN started_at TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE projections ADD COLUMN updated_at TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE projections ADD COLUMN search_text TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE projections ADD COLUMN has_errors BOOLEAN NOT NULL DEFAULT FALSE",
    # rows written before: found by run ID; times and names come with a rebuild
    "UPDATE projections SET search_text = lower(run_id)",
)
#: One index per sort key within a tenant (run ID is the primary key's); {c} is the collation
#: that makes the index's order the queries' (PostgreSQL: bytewise, as ``list`` orders).
RUN_INDEXES: tuple[str, ...] = (
    "CREATE INDEX projections_by_updated ON projections (tenant_id{c}, updated_at{c}, run_id{c})",
    "CREATE INDEX projections_by_started ON projections (tenant_id{c}, started_at{c}, run_id{c})",
    "CREATE INDEX projections_by_events ON projections (tenant_id{c}, version, run_id{c})",
    "CREATE INDEX projections_by_status_updated ON projections "
    "(tenant_id{c}, status{c}, updated_at{c}, run_id{c})",
)


#: How many times a new process continued the run (run.resumed): the runs page's "resumed"
#: filter. Rows written before hold 0 until a rebuild.
RESUMES_COLUMN: tuple[str, ...] = (
    "ALTER TABLE projections ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0",
)


def _is_sqlite(cur: Any) -> bool:
    return type(cur).__module__.startswith("sqlite3")


def add_run_index(cur: Any) -> None:
    """Migration 3: the runs page's columns and indexes (collation per dialect)."""
    collate = "" if _is_sqlite(cur) else ' COLLATE "C"'
    for statement in RUN_INDEX_COLUMNS:
        cur.execute(statement)
    for statement in RUN_INDEXES:
        cur.execute(statement.format(c=collate))


#: The projection store's schema, in order; the tracking table's come first (see ``migrate``).
PROJECTION = Component(
    "projection",
    (
        Migration(1, "the first tables", FIRST_SCHEMA),
        offsets_into_tracking("projection", "consumer_offsets", "partition_id"),
        Migration(3, "the runs page's search, time and error columns", add_run_index),
        Migration(4, "the runs page's resumed filter", RESUMES_COLUMN),
    ),
)

#: Fenced: never over a halted run, never to a lower version (an equal one rewrites, idempotent).
UPSERT_PROJECTION = """
INSERT INTO projections (
    tenant_id, run_id, status, version, projector_version, state, halted,
    started_at, updated_at, search_text, has_errors, resumes
)
VALUES (?, ?, ?, ?, ?, ?, FALSE, ?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET
    status = excluded.status,
    version = excluded.version,
    projector_version = excluded.projector_version,
    state = excluded.state,
    started_at = excluded.started_at,
    updated_at = excluded.updated_at,
    search_text = excluded.search_text,
    has_errors = excluded.has_errors,
    resumes = excluded.resumes
WHERE projections.halted = FALSE AND projections.version <= excluded.version
"""

#: The first halt wins: its reason and coordinates name the event that stopped the run.
UPSERT_HALT = """
INSERT INTO projections (
    tenant_id, run_id, status, version, projector_version, state, halted, halt_reason,
    halt_sequence, halt_event_id, halt_event_type, halt_schema_version,
    halt_topic, halt_partition, halt_offset
)
VALUES (?, ?, NULL, 0, ?, NULL, TRUE, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET
    halted = TRUE,
    halt_reason = excluded.halt_reason,
    halt_sequence = excluded.halt_sequence,
    halt_event_id = excluded.halt_event_id,
    halt_event_type = excluded.halt_event_type,
    halt_schema_version = excluded.halt_schema_version,
    halt_topic = excluded.halt_topic,
    halt_partition = excluded.halt_partition,
    halt_offset = excluded.halt_offset
WHERE projections.halted = FALSE
"""

UPSERT_SNAPSHOT = """
INSERT INTO projection_snapshots (
    tenant_id, run_id, projector_version, last_applied_sequence, state
) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET
    projector_version = excluded.projector_version,
    last_applied_sequence = excluded.last_applied_sequence,
    state = excluded.state
"""

ROW_COLUMNS = """tenant_id, run_id, status, version, projector_version, state, halted,
    halt_reason, halt_sequence, halt_event_id, halt_event_type, halt_schema_version,
    halt_topic, halt_partition, halt_offset"""

SELECT_ONE = f"SELECT {ROW_COLUMNS} FROM projections WHERE tenant_id = ? AND run_id = ?"
SELECT_ROWS = f"SELECT {ROW_COLUMNS} FROM projections"
SELECT_FENCE = "SELECT halted, version FROM projections WHERE tenant_id = ? AND run_id = ?"
SELECT_SNAPSHOT = """SELECT projector_version, last_applied_sequence, state
FROM projection_snapshots WHERE tenant_id = ? AND run_id = ?"""


#: ``list`` order: SQLite compares TEXT bytewise; PostgreSQL needs ``COLLATE "C"`` to do the
#: same (its default collation follows the locale), so both list rows in one order.
ORDER_ROWS = "tenant_id, run_id"
ORDER_ROWS_BYTEWISE = 'tenant_id COLLATE "C", run_id COLLATE "C"'


def list_statement(
    status: str | None,
    tenant: str | None,
    halted: bool | None,
    limit: int | None,
    *,
    order: str = ORDER_ROWS,
    run_id: str | None = None,
    after: str | None = None,
    bytewise: str = "",
) -> tuple[str, tuple[Any, ...]]:
    """The ``list`` query (``?`` style) and its parameters, ordered by (tenant, run).

    ``after`` needs ``tenant`` (a cursor within one tenant's runs); ``bytewise`` is the
    collation clause that makes ``>`` agree with the order (PostgreSQL: ``COLLATE "C"``)."""
    if after is not None and tenant is None:
        raise ValueError("a keyset cursor (after) needs a tenant")
    where: list[str] = []
    params: list[Any] = []
    filters = (("status", status), ("tenant_id", tenant), ("halted", halted), ("run_id", run_id))
    for column, value in filters:
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if after is not None:
        where.append(f"run_id{bytewise} > ?")
        params.append(after)
    statement = SELECT_ROWS
    if where:
        statement += " WHERE " + " AND ".join(where)
    statement += " ORDER BY " + order
    if limit is not None:
        statement += " LIMIT ?"
        params.append(limit)
    return statement, tuple(params)


def search_text(state: RunProjection) -> str:
    """What a runs search matches a substring of: the run ID and the names its events gave,
    lowercased (so ``LIKE`` is case-insensitive in both databases), one per line."""
    names = (state.run_id, *state.session_ids, *state.model_ids, *state.tool_names)
    return "\n".join(names).lower()


#: Each sort key's column.
SORT_COLUMNS: dict[SortKey, str] = {
    "updated": "updated_at",
    "started": "started_at",
    "run": "run_id",
    "events": "version",
}


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_filters(query: RunQuery) -> tuple[list[str], list[Any]]:
    """The WHERE terms of a runs query (no cursor), ``?`` style."""
    where: list[str] = ["tenant_id = ?"]
    params: list[Any] = [query.tenant]
    if query.text:
        where.append("search_text LIKE ? ESCAPE '\\'")
        params.append(_like(query.text))
    if query.status is not None:
        where.append("status = ?")
        params.append(query.status)
    if query.halted is not None:
        where.append("halted = ?")
        params.append(query.halted)
    if query.has_errors is not None:
        where.append("(has_errors OR halted)" if query.has_errors else "NOT (has_errors OR halted)")
    if query.resumed is not None:
        where.append("resumes > 0" if query.resumed else "resumes = 0")
    if query.since:
        where.append("updated_at >= ?")
        params.append(query.since)
    if query.until:
        where.append("started_at <> '' AND started_at <= ?")
        params.append(query.until)
    return where, params


def search_statements(query: RunQuery, bytewise: str = "") -> tuple[str, tuple[Any, ...]]:
    """The page query of ``query`` (one more row than the page, to know whether another
    follows), ``?`` style; ``bytewise`` is the collation of text comparisons and order."""
    where, params = search_filters(query)
    column = SORT_COLUMNS[query.sort]
    key = column if query.sort == "events" else f"{column}{bytewise}"
    run = f"run_id{bytewise}"
    backwards = query.before is not None and query.after is None
    descending = query.descending != backwards  # a page before is read in reverse order
    cursor = query.before if backwards else query.after
    if cursor is not None:
        value: Any = int(cursor[0]) if query.sort == "events" else cursor[0]
        if query.sort == "run":
            where.append(f"{run} {'<' if descending else '>'} ?")
            params.append(cursor[1])
        else:
            where.append(f"({key}, {run}) {'<' if descending else '>'} (?, ?)")
            params.extend((value, cursor[1]))
    way = " DESC" if descending else ""
    order = f"{run}{way}" if query.sort == "run" else f"{key}{way}, {run}{way}"
    statement = f"{SELECT_ROWS} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?"
    params.append(query.limit + 1)
    return statement, tuple(params)


def count_statement(query: RunQuery) -> tuple[str, tuple[Any, ...]]:
    where, params = search_filters(query)
    return f"SELECT COUNT(*) FROM projections WHERE {' AND '.join(where)}", tuple(params)


def stored_row(row: tuple[Any, ...]) -> StoredProjection:
    """A row of ``ROW_COLUMNS`` as a :class:`StoredProjection` (same for every database)."""
    (tenant, run, status, version, projector_version, state, halted, reason) = row[:8]
    seq, event_id, event_type, schema_version, topic, partition, offset = row[8:]
    coordinates = None
    if halted and seq is not None:
        coordinates = EventCoordinates(
            sequence=int(seq),
            event_id=event_id,
            event_type=event_type,
            schema_version=int(schema_version),
            topic=topic,
            partition=None if partition is None else int(partition),
            offset=None if offset is None else int(offset),
        )
    return StoredProjection(
        tenant_id=tenant,
        run_id=run,
        status=status,
        version=int(version),
        projector_version=int(projector_version),
        state=RunProjection.from_json(state) if state is not None else None,
        halted=bool(halted),
        halt_reason=reason,
        halt_coordinates=coordinates,
    )


def stored_snapshot(tenant_id: str, run_id: str, row: tuple[Any, ...]) -> ProjectionSnapshot:
    """A ``SELECT_SNAPSHOT`` row as a verified snapshot (digest, version, sequence);
    :class:`SnapshotMismatch` with the reason otherwise."""
    projector_version, sequence, text = row
    return open_sealed(tenant_id, run_id, int(projector_version), int(sequence), text)


class BatchWriter:
    """The fenced writes of ``apply_batch``, for any DB-API cursor (sqlite3 or psycopg).

    Both adapters run exactly these statements inside their own transaction, in their
    ``dialect``'s placeholders. A fence that refuses a write raises :class:`StoreConflict`,
    and the adapter's transaction rolls the whole batch back.
    """

    def __init__(self, dialect: Dialect = "sqlite") -> None:
        #: The projector's consumed offsets (component ``projection``).
        self.tracking = Tracking("projection", dialect)
        self._projection = placeholders(UPSERT_PROJECTION, dialect)
        self._fence = placeholders(SELECT_FENCE, dialect)
        self._halt = placeholders(UPSERT_HALT, dialect)
        self._snapshot = placeholders(UPSERT_SNAPSHOT, dialect)

    def projection(self, cur: Any, state: RunProjection) -> None:
        cur.execute(
            self._projection,
            (
                state.tenant_id,
                state.run_id,
                state.status,
                state.version,
                PROJECTOR_VERSION,
                state.to_json(),
                state.started_at or "",
                state.updated_at or "",
                search_text(state),
                state.has_errors,
                state.resumes,
            ),
        )
        if cur.rowcount == 0:
            row = cur.execute(self._fence, (state.tenant_id, state.run_id)).fetchone()
            why = "is halted" if row and row[0] else f"is at version {row[1] if row else '?'}"
            raise StoreConflict(
                f"projection {state.tenant_id}/{state.run_id} {why}; "
                f"refusing to write version {state.version}"
            )

    def halt(self, cur: Any, halt: Halt) -> None:
        c = halt.coordinates
        cur.execute(
            self._halt,
            (
                halt.tenant_id,
                halt.run_id,
                PROJECTOR_VERSION,
                halt.reason,
                c.sequence,
                c.event_id,
                c.event_type,
                c.schema_version,
                c.topic,
                c.partition,
                c.offset,
            ),
        )

    def snapshot(self, cur: Any, snapshot: ProjectionSnapshot) -> None:
        state = snapshot.state
        cur.execute(
            self._snapshot,
            (
                state.tenant_id,
                state.run_id,
                snapshot.projector_version,
                snapshot.last_applied_sequence,
                snapshot.sealed(),
            ),
        )

    def offset(self, cur: Any, topic: str, partition: int, offset: int) -> None:
        try:
            self.tracking.record(cur, {(topic, partition): offset})
        except PositionRegressed as exc:
            raise StoreConflict(
                f"offset of {topic}[{partition}] is {exc.stored}; "
                f"refusing to move it back to {offset}"
            ) from exc


class SqlProjectionStore:
    """:class:`~runtrail.projection.store.ProjectionStore` on a :mod:`runtrail.persistence`
    database, as both dialects do it alike; an adapter opens the database and adds its locks."""

    #: ``list`` order, and the collation that makes its keyset cursor (``run_id > ?``) agree
    LIST_ORDER: ClassVar[str] = ORDER_ROWS
    BYTEWISE: ClassVar[str] = ""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.dialect: Dialect = db.dialect
        self._writer = BatchWriter(db.dialect)

    def close(self) -> None:
        self._db.close()

    def _query(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._db.query(placeholders(statement, self.dialect), params)

    # --- what a dialect adds -------------------------------------------------------------------
    def _lock_batch(self, cur: Any, batch: ProjectionBatch) -> None:
        """Take what keeps concurrent writers of the batch's runs and partitions apart."""

    def _lock_offsets(self, cur: Any, topic: str, partitions: Iterable[int]) -> None:
        """Take what keeps concurrent writers of these partitions' offsets apart."""

    # --- writes --------------------------------------------------------------------------------
    def apply_batch(self, batch: ProjectionBatch) -> None:
        with self._db.transaction() as cur:
            self._lock_batch(cur, batch)
            for state in batch.projections:
                self._writer.projection(cur, state)
            for halt in batch.halts:
                self._writer.halt(cur, halt)
            for snapshot in batch.snapshots:
                self._writer.snapshot(cur, snapshot)
            for (topic, partition), offset in batch.offsets.items():
                self._writer.offset(cur, topic, partition, offset)

    def rewind_offsets(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets, back or forward, past the fence (``runtrail offsets set``); under
        the same per-partition locks as :meth:`apply_batch`."""
        with self._db.transaction() as cur:
            self._lock_offsets(cur, topic, offsets)
            self._writer.tracking.rewind(cur, topic, offsets)

    def halt(self, tenant_id: str, run_id: str, reason: str, coordinates: EventCoordinates) -> None:
        self.apply_batch(ProjectionBatch(halts=[Halt(tenant_id, run_id, reason, coordinates)]))

    def save_snapshot(self, snapshot: ProjectionSnapshot) -> None:
        self.apply_batch(ProjectionBatch(snapshots=[snapshot]))

    # --- reads ---------------------------------------------------------------------------------
    def get(self, tenant_id: str, run_id: str) -> StoredProjection | None:
        rows = self._query(SELECT_ONE, (tenant_id, run_id))
        return stored_row(rows[0]) if rows else None

    def list(
        self,
        status: str | None = None,
        tenant: str | None = None,
        *,
        halted: bool | None = None,
        limit: int | None = None,
        run_id: str | None = None,
        after: str | None = None,
    ) -> StoredList:
        statement, params = list_statement(
            status,
            tenant,
            halted,
            limit,
            order=self.LIST_ORDER,
            run_id=run_id,
            after=after,
            bytewise=self.BYTEWISE,
        )
        return [stored_row(r) for r in self._query(statement, params)]

    def search(self, query: RunQuery) -> RunsFound:
        statement, params = search_statements(query, self.BYTEWISE)
        rows = [stored_row(r) for r in self._query(statement, params)]
        more = len(rows) > query.limit
        rows = rows[: query.limit]
        backwards = query.before is not None and query.after is None
        if backwards:
            rows.reverse()
        counted = self._query(*count_statement(query))
        cursor = query.before if backwards else query.after
        return RunsFound(
            rows=rows,
            total=int(counted[0][0]),
            more_after=more if not backwards else True,
            more_before=more if backwards else cursor is not None,
        )

    def load_snapshot(self, tenant_id: str, run_id: str) -> ProjectionSnapshot | None:
        rows = self._query(SELECT_SNAPSHOT, (tenant_id, run_id))
        return stored_snapshot(tenant_id, run_id, rows[0]) if rows else None
