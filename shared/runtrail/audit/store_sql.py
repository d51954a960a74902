"""The audit link store's SQL, once for both dialects, and what both adapters do alike.

Every statement is here, written with ``?`` placeholders
(:func:`~runtrail.persistence.dialect.placeholders` gives psycopg its ``%s``). Most are the
same in both dialects; where one does better its own way, each has its own statement, named for
its dialect: PostgreSQL reads the heads of a batch's runs in one statement (``unnest`` and one
backward index probe per run), finds events by array and writes links by ``COPY``; SQLite
probes run by run, finds events in chunks of ``IN (…)`` and inserts links many rows a statement.

:class:`SqlLinkStore` is both adapters' base: the append transaction (links checked against
their heads, then written with the batch's positions, all or nothing), the reads, and the
signed tree heads. The adapters (:mod:`.store_sqlite`, :mod:`.store_postgres`) open the database and
provide what their dialect does its own way.

The schema is the ``audit`` component's migrations, one list per dialect (:data:`AUDIT_SQLITE`,
:data:`AUDIT_POSTGRES`): the column types and the triggers that refuse UPDATE and DELETE are
each dialect's own. Links are stored with their event as the RFC 8785 text that was hashed
(TEXT, not ``jsonb``, which would re-order it), so ``sha256(prev_hash || '|' || event)`` can be
checked straight off a row. Signed tree heads are kept in ``audit_checkpoints`` and
``audit_checkpoint_heads``, the log's in ``audit_log_checkpoints``: a table name is part of the
data a deployed database holds, so it stays as first created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple

from runtrail.audit.appending import LinkRow, RunKey, rows_to_append
from runtrail.audit.errors import ChainConflict, MalformedLink
from runtrail.audit.link import Link, LinkSummary, RunHead
from runtrail.audit.store import StoredTreeHead, TopicPartition
from runtrail.audit.tracking import AUDIT_TRACKING, record_offsets
from runtrail.audit.tree_head import TreeHead, order_heads
from runtrail.events.errors import EventError
from runtrail.events.jsonform import loads_strict
from runtrail.persistence.dialect import Database, Dialect, placeholders
from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.tracking import Tracking, offsets_into_tracking

# --- the schema ----------------------------------------------------------------------------

#: SQLite: the tables and triggers as the first release created them (migration 1 adopts them).
SQLITE_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS audit_links (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    idx INTEGER NOT NULL CHECK (idx >= 0),
    event_id TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, idx),
    UNIQUE (tenant_id, event_id))""",
    """CREATE TRIGGER IF NOT EXISTS audit_links_no_update BEFORE UPDATE ON audit_links
BEGIN SELECT RAISE(ABORT, 'audit links are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_links_no_delete BEFORE DELETE ON audit_links
BEGIN SELECT RAISE(ABORT, 'audit links are append-only'); END""",
    """CREATE TABLE IF NOT EXISTS audit_offsets (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition))""",
    """CREATE TABLE IF NOT EXISTS audit_checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    body TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS audit_checkpoint_heads (
    checkpoint_id INTEGER NOT NULL REFERENCES audit_checkpoints (id),
    leaf_index INTEGER NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    length INTEGER NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (checkpoint_id, leaf_index))""",
    """CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END""",
)

#: PostgreSQL: the tables and triggers as the first release created them (migration 1 adopts them).
POSTGRES_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_links (
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    idx BIGINT NOT NULL CHECK (idx >= 0),
    event_id TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (tenant_id, run_id, idx),
    UNIQUE (tenant_id, event_id)
);
CREATE TABLE IF NOT EXISTS audit_offsets (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset BIGINT NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    origin TEXT NOT NULL,
    size BIGINT NOT NULL,
    body TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_checkpoints_body ON audit_checkpoints (body);
CREATE TABLE IF NOT EXISTS audit_checkpoint_heads (
    checkpoint_id BIGINT NOT NULL REFERENCES audit_checkpoints (id),
    leaf_index BIGINT NOT NULL,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    length BIGINT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (checkpoint_id, leaf_index)
);
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit records are append-only (% on %)', TG_OP, TG_TABLE_NAME;
END
$$;
CREATE OR REPLACE TRIGGER audit_links_append_only BEFORE UPDATE OR DELETE ON audit_links
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_links_no_truncate BEFORE TRUNCATE ON audit_links
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoints_append_only BEFORE UPDATE OR DELETE
    ON audit_checkpoints FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoint_heads_append_only BEFORE UPDATE OR DELETE
    ON audit_checkpoint_heads FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE OR REPLACE TRIGGER audit_checkpoint_heads_no_truncate BEFORE TRUNCATE
    ON audit_checkpoint_heads FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
"""


#: SQLite: the transparency log (one leaf per sealed link, its index fixed when the link is
#: stored) and the log's signed checkpoints; existing links become leaves in (tenant, run,
#: index) order, compared as bytes.
SQLITE_LOG_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE audit_log (
    leaf_index INTEGER PRIMARY KEY CHECK (leaf_index >= 0),
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    hash TEXT NOT NULL)""",
    "CREATE INDEX audit_log_link ON audit_log (tenant_id, run_id, idx)",
    """CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END""",
    """CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END""",
    """INSERT INTO audit_log (leaf_index, tenant_id, run_id, idx, hash)
SELECT ROW_NUMBER() OVER (ORDER BY tenant_id, run_id, idx) - 1, tenant_id, run_id, idx, hash
FROM audit_links""",
    """CREATE TABLE audit_log_checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    size INTEGER NOT NULL,
    body TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at TEXT NOT NULL)""",
    """CREATE TRIGGER audit_log_checkpoints_no_update BEFORE UPDATE ON audit_log_checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END""",
    """CREATE TABLE audit_log_cosignatures (
    checkpoint_id INTEGER NOT NULL REFERENCES audit_log_checkpoints (id),
    witness TEXT NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (checkpoint_id, witness))""",
    """CREATE TRIGGER audit_log_checkpoints_no_delete BEFORE DELETE ON audit_log_checkpoints
BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END""",
)

#: PostgreSQL: the same log and checkpoints (``COLLATE "C"``: byte order, as SQLite's).
POSTGRES_LOG_SCHEMA = """
CREATE TABLE audit_log (
    leaf_index BIGINT PRIMARY KEY CHECK (leaf_index >= 0),
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX audit_log_link ON audit_log (tenant_id, run_id, idx);
INSERT INTO audit_log (leaf_index, tenant_id, run_id, idx, hash)
SELECT ROW_NUMBER() OVER (ORDER BY tenant_id COLLATE "C", run_id COLLATE "C", idx) - 1,
    tenant_id, run_id, idx, hash
FROM audit_links;
CREATE TABLE audit_log_checkpoints (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    size BIGINT NOT NULL,
    body TEXT NOT NULL,
    note TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE audit_log_cosignatures (
    checkpoint_id BIGINT NOT NULL REFERENCES audit_log_checkpoints (id),
    witness TEXT NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (checkpoint_id, witness)
);
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_log_checkpoints_append_only BEFORE UPDATE OR DELETE
    ON audit_log_checkpoints FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_log_checkpoints_no_truncate BEFORE TRUNCATE ON audit_log_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
"""


def _component(first_schema: Sequence[str], log_schema: Sequence[str]) -> Component:
    """The ``audit`` component on ``first_schema`` (the tracking table's migrations come first)."""
    return Component(
        "audit",
        (
            Migration(1, "the first tables", first_schema),
            offsets_into_tracking("audit", "audit_offsets", "partition"),
            Migration(3, "the append-only transparency log", log_schema),
        ),
    )


#: The SQLite audit store's schema, in order.
AUDIT_SQLITE = _component(SQLITE_SCHEMA, SQLITE_LOG_SCHEMA)
#: The PostgreSQL audit store's schema, in order.
AUDIT_POSTGRES = _component((POSTGRES_SCHEMA,), (POSTGRES_LOG_SCHEMA,))

# --- statements both dialects run ----------------------------------------------------------

LINK_COLUMNS = "idx, prev_hash, hash, event"
SELECT_CHAIN = (
    f"SELECT {LINK_COLUMNS} FROM audit_links WHERE tenant_id = ? AND run_id = ? ORDER BY idx"
)
SELECT_LINK_AT = (
    f"SELECT {LINK_COLUMNS} FROM audit_links WHERE tenant_id = ? AND run_id = ? AND idx = ?"
)
SELECT_EVENT = f"SELECT {LINK_COLUMNS} FROM audit_links WHERE tenant_id = ? AND event_id = ?"
#: A run's last link (one backward probe of the primary key).
SELECT_HEAD = (
    "SELECT idx, hash FROM audit_links WHERE tenant_id = ? AND run_id = ? ORDER BY idx DESC LIMIT 1"
)
#: What a retried link must match to be skipped as already stored.
SELECT_STORED = (
    "SELECT prev_hash, hash, event_id FROM audit_links "
    "WHERE tenant_id = ? AND run_id = ? AND idx = ?"
)
INSERT_TREE_HEAD = (
    "INSERT INTO audit_checkpoints (origin, size, body, note, created_at) VALUES (?, ?, ?, ?, ?)"
)
_TREE_HEAD_COLUMNS = "SELECT id, body, note, created_at FROM audit_checkpoints"
SELECT_LATEST_TREE_HEAD = f"{_TREE_HEAD_COLUMNS} ORDER BY id DESC LIMIT 1"
SELECT_TREE_HEAD = f"{_TREE_HEAD_COLUMNS} WHERE id = ?"
SELECT_TREE_HEAD_BY_BODY = f"{_TREE_HEAD_COLUMNS} WHERE body = ? ORDER BY id DESC LIMIT 1"
SELECT_COMMITTED_HEADS = (
    "SELECT tenant_id, run_id, length, hash FROM audit_checkpoint_heads "
    "WHERE checkpoint_id = ? ORDER BY leaf_index"
)

#: The log's next leaf index (its size); read under the log's lock in the append transaction.
SELECT_LOG_SIZE = "SELECT COALESCE(MAX(leaf_index) + 1, 0) FROM audit_log"
SELECT_LOG_ENTRIES = (
    "SELECT hash FROM audit_log WHERE leaf_index >= ? AND leaf_index < ? ORDER BY leaf_index"
)
#: The first leaf of a link: a chain rewritten behind the store's back (its rows deleted and
#: sealed again) appends new leaves, and the log keeps the first ones as evidence.
SELECT_LOG_INDEX = (
    "SELECT MIN(leaf_index) FROM audit_log WHERE tenant_id = ? AND run_id = ? AND idx = ?"
)
INSERT_LOG_CHECKPOINT = (
    "INSERT INTO audit_log_checkpoints (size, body, note, created_at) VALUES (?, ?, ?, ?)"
)
_LOG_CHECKPOINT_COLUMNS = "SELECT id, body, note, created_at FROM audit_log_checkpoints"
#: The largest: two members signing at once may save them out of order.
SELECT_LATEST_LOG_CHECKPOINT = f"{_LOG_CHECKPOINT_COLUMNS} ORDER BY size DESC, id DESC LIMIT 1"
SELECT_LOG_CHECKPOINT_OF_SIZE = f"{_LOG_CHECKPOINT_COLUMNS} WHERE size = ? ORDER BY id DESC LIMIT 1"
#: A witness's cosignature is kept once (a second identical submission changes nothing).
INSERT_COSIGNATURE: Mapping[Dialect, str] = {
    "sqlite": "INSERT OR IGNORE INTO audit_log_cosignatures (checkpoint_id, witness, line) "
    "VALUES (?, ?, ?)",
    "postgresql": "INSERT INTO audit_log_cosignatures (checkpoint_id, witness, line) "
    "VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
}
SELECT_COSIGNATURES = (
    "SELECT witness, line FROM audit_log_cosignatures WHERE checkpoint_id = ? ORDER BY witness"
)

#: The envelope fields a summary reads from each stored event (JSON member paths, in this
#: order): the actor's kind and ID are one level down.
SUMMARY_FIELDS: tuple[tuple[str, ...], ...] = (
    ("eventId",), ("type",), ("sequence",), ("step",), ("turnId",), ("sessionId",),
    ("occurredAt",), ("recordedAt",), ("actor", "kind"), ("actor", "id"),
)  # fmt: skip


def _json_member(dialect: Dialect, path: tuple[str, ...]) -> str:
    """How ``dialect`` reads the text of one member (by path) of the stored event."""
    if dialect == "sqlite":
        return f"json_extract(event, '$.{'.'.join(path)}')"
    *parents, last = path
    return "event::jsonb" + "".join(f" -> '{p}'" for p in parents) + f" ->> '{last}'"


def select_summaries(dialect: Dialect) -> str:
    """A run's links as (idx, *SUMMARY_FIELDS), read by the database from the event text."""
    members = ", ".join(_json_member(dialect, path) for path in SUMMARY_FIELDS)
    return f"SELECT idx, {members} FROM audit_links WHERE tenant_id = ? AND run_id = ? ORDER BY idx"


#: Every run's head: SQLite joins each run's greatest index; PostgreSQL keeps the first row
#: of each run in descending index order.
SELECT_HEADS: Mapping[Dialect, str] = {
    "sqlite": (
        "SELECT l.tenant_id, l.run_id, l.idx, l.hash FROM audit_links AS l "
        "JOIN (SELECT tenant_id, run_id, MAX(idx) AS idx FROM audit_links "
        "GROUP BY tenant_id, run_id) AS m USING (tenant_id, run_id, idx)"
    ),
    "postgresql": (
        "SELECT DISTINCT ON (tenant_id, run_id) tenant_id, run_id, idx, hash "
        "FROM audit_links ORDER BY tenant_id, run_id, idx DESC"
    ),
}

# --- SQLite's own statements ---------------------------------------------------------------

#: Rows per INSERT statement (7 variables each: far below any SQLite's limit of 999 or more).
SQLITE_INSERT_ROWS = 128
_INSERT_LINKS = (
    "INSERT INTO audit_links (tenant_id, run_id, idx, event_id, prev_hash, hash, event) VALUES "
)
_ROW_MARKS = "(?, ?, ?, ?, ?, ?, ?)"
_INSERT_LINKS_FULL = _INSERT_LINKS + ", ".join([_ROW_MARKS] * SQLITE_INSERT_ROWS)


def sqlite_insert_links(rows: int) -> str:
    """One INSERT of ``rows`` links (at most :data:`SQLITE_INSERT_ROWS`)."""
    if rows == SQLITE_INSERT_ROWS:
        return _INSERT_LINKS_FULL
    return _INSERT_LINKS + ", ".join([_ROW_MARKS] * rows)


#: Most eventIds in one ``IN (…)`` list (SQLite allows 32766 variables since 3.32; stay far below).
SQLITE_IN_CHUNK = 500


def sqlite_select_events(count: int) -> str:
    """The links that sealed ``count`` eventIds of a tenant, by an ``IN (…)`` list."""
    marks = ", ".join("?" * count)
    return (
        f"SELECT event_id, {LINK_COLUMNS} FROM audit_links "
        f"WHERE tenant_id = ? AND event_id IN ({marks})"
    )


_INSERT_LEAVES = "INSERT INTO audit_log (leaf_index, tenant_id, run_id, idx, hash) VALUES "
_LEAF_MARKS = "(?, ?, ?, ?, ?)"


def sqlite_insert_leaves(rows: int) -> str:
    """One INSERT of ``rows`` log leaves (at most :data:`SQLITE_INSERT_ROWS`)."""
    return _INSERT_LEAVES + ", ".join([_LEAF_MARKS] * rows)


SQLITE_INSERT_COMMITTED_HEAD = (
    "INSERT INTO audit_checkpoint_heads "
    "(checkpoint_id, leaf_index, tenant_id, run_id, length, hash) VALUES (?, ?, ?, ?, ?, ?)"
)

# --- PostgreSQL's own statements -----------------------------------------------------------

#: One transaction-scoped advisory lock per run of a batch, keys in ascending order.
POSTGRES_LOCK_RUNS = "SELECT pg_advisory_xact_lock(k) FROM unnest(?::bigint[]) AS k"

#: Last link of each (tenant, run) given as two arrays: one backward index probe per run.
POSTGRES_HEADS_OF = """
SELECT k.tenant_id, k.run_id, l.idx, l.hash
FROM unnest(?::text[], ?::text[]) AS k (tenant_id, run_id)
CROSS JOIN LATERAL (
    SELECT idx, hash FROM audit_links
    WHERE tenant_id = k.tenant_id AND run_id = k.run_id
    ORDER BY idx DESC LIMIT 1
) AS l
"""

#: COPY, not INSERT: about ten times faster for a batch of links, with the same constraints.
POSTGRES_COPY_LINKS = (
    "COPY audit_links (tenant_id, run_id, idx, event_id, prev_hash, hash, event) FROM STDIN"
)

#: The one lock every append takes, after its runs' locks, to number the log's new leaves
#: ("rtauditl" in ASCII): leaf indexes follow commit order, with no gap and no race.
POSTGRES_LOG_LOCK = "SELECT pg_advisory_xact_lock(8247343478862145900)"

POSTGRES_COPY_LEAVES = "COPY audit_log (leaf_index, tenant_id, run_id, idx, hash) FROM STDIN"

POSTGRES_SELECT_EVENTS = (
    f"SELECT event_id, {LINK_COLUMNS} FROM audit_links "
    "WHERE tenant_id = ? AND event_id = ANY(?::text[])"
)

POSTGRES_INSERT_TREE_HEAD = INSERT_TREE_HEAD + " RETURNING id"

POSTGRES_INSERT_COMMITTED_HEADS = (
    "INSERT INTO audit_checkpoint_heads "
    "(checkpoint_id, leaf_index, tenant_id, run_id, length, hash) "
    "SELECT ?, * FROM unnest(?::bigint[], ?::text[], ?::text[], ?::bigint[], ?::text[])"
)

# --- rows --------------------------------------------------------------------------------


class LeafRow(NamedTuple):
    """One leaf of the transparency log: a sealed link's place and hash (nothing else)."""

    leaf_index: int
    tenant_id: str
    run_id: str
    idx: int
    hash: str


def link_from_row(row: Sequence[Any], position: int | None = None) -> Link:
    """A stored (index, prevHash, hash, event JSON) row; a row that is not one is malformed.

    ``position`` is the row's place in the chain as read (``load_chain``); the error carries
    it rather than the stored ``idx`` label, which an attacker could have rewritten.
    """
    idx, prev_hash, hash_, text = row
    where = int(idx) if position is None else position
    try:
        event = loads_strict(str(text))
    except (ValueError, EventError) as exc:
        raise MalformedLink(f"stored link {idx}: event is not JSON ({exc})", where) from exc
    if not isinstance(event, dict):
        raise MalformedLink(f"stored link {idx}: event is not a JSON object", where)
    return Link(int(idx), event, str(prev_hash), str(hash_))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.lstrip("-").isdigit():
        return int(value)
    return None


def summary_from_row(row: Sequence[Any]) -> LinkSummary:
    """A (idx, *SUMMARY_FIELDS) row; a member missing or of another type reads as None."""
    idx, event_id, etype, sequence, step, turn, session, occurred, recorded, kind, actor = row
    return LinkSummary(
        index=int(idx),
        event_id=_text(event_id),
        event_type=_text(etype),
        sequence=_int(sequence),
        step=_int(step),
        turn_id=_text(turn),
        session_id=_text(session),
        occurred_at=_text(occurred),
        recorded_at=_text(recorded),
        actor_kind=_text(kind),
        actor_id=_text(actor),
    )


def stored_tree_head(row: Sequence[Any]) -> StoredTreeHead:
    tree_head_id, body, note, created = row
    return StoredTreeHead(int(tree_head_id), TreeHead.parse(str(body)), str(note), str(created))


def head_from_row(row: Sequence[Any]) -> RunHead:
    """A (tenant, run, last index, hash) row as the run's head."""
    tenant, run, idx, hash_ = row
    return RunHead(str(tenant), str(run), int(idx) + 1, str(hash_))


# --- the adapters' base --------------------------------------------------------------------


class SqlLinkStore:
    """:class:`~runtrail.audit.store.LinkStore` on a :mod:`runtrail.persistence` database, as
    both dialects do it alike; an adapter opens the database and provides the rest."""

    #: What the driver raises when a constraint refuses a row (a link not extending its head).
    INTEGRITY_ERROR: ClassVar[type[Exception]]
    #: What the database raises reading a member of a stored event that is not JSON.
    MALFORMED_JSON: ClassVar[type[Exception]]

    def __init__(self, db: Database) -> None:
        self._db = db
        self.dialect: Dialect = db.dialect
        self._tracking = Tracking(AUDIT_TRACKING, db.dialect)

    def close(self) -> None:
        self._db.close()

    def _sql(self, statement: str) -> str:
        return placeholders(statement, self.dialect)

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.query(self._sql(statement), params)

    # --- what each dialect does its own way ---------------------------------------------------
    def _heads_for_append(self, cur: Any, runs: Sequence[RunKey]) -> dict[RunKey, tuple[int, str]]:
        """(length, hash) of the runs' heads in the append's transaction, after taking
        whatever lock keeps another writer from extending them meanwhile."""
        raise NotImplementedError

    def _insert_links(self, cur: Any, rows: Sequence[LinkRow]) -> None:
        raise NotImplementedError

    def _insert_tree_head(self, cur: Any, values: Sequence[Any]) -> int:
        """Insert :data:`INSERT_TREE_HEAD`'s ``values``; the new tree head's id."""
        raise NotImplementedError

    def _lock_log(self, cur: Any) -> None:
        """Keep every other append from numbering leaves until this transaction ends."""
        raise NotImplementedError

    def _insert_leaves(self, cur: Any, rows: Sequence[LeafRow]) -> None:
        raise NotImplementedError

    def _insert_log_checkpoint(self, cur: Any, values: Sequence[Any]) -> int:
        """Insert :data:`INSERT_LOG_CHECKPOINT`'s ``values``; the new checkpoint's id."""
        raise NotImplementedError

    def _insert_committed_heads(
        self, cur: Any, tree_head_id: int, ordered: Sequence[RunHead]
    ) -> None:
        raise NotImplementedError

    # --- writing ----------------------------------------------------------------------------
    def append_batch(self, links: Sequence[Link], offsets: Mapping[TopicPartition, int]) -> None:
        """Append links and set offsets in one transaction; all or nothing."""
        runs = sorted({(link.tenant_id, link.run_id) for link in links})
        with self._db.transaction() as cur:
            heads = self._heads_for_append(cur, runs)
            rows = rows_to_append(links, heads, lambda link: self._is_stored(cur, link))
            if rows:
                try:
                    self._insert_links(cur, rows)
                    self._append_leaves(cur, rows)
                except self.INTEGRITY_ERROR as exc:
                    raise ChainConflict(f"link refused by the store: {exc}") from exc
            record_offsets(self._tracking, cur, offsets)

    def _append_leaves(self, cur: Any, rows: Sequence[LinkRow]) -> None:
        """The new links as the log's next leaves, numbered in this transaction: a leaf's
        index is as durable as its link, and no restart or rebalance can renumber it."""
        self._lock_log(cur)
        start = int(cur.execute(self._sql(SELECT_LOG_SIZE)).fetchone()[0])
        self._insert_leaves(
            cur,
            [
                LeafRow(start + i, row.tenant_id, row.run_id, row.idx, row.hash)
                for i, row in enumerate(rows)
            ],
        )

    def _is_stored(self, cur: Any, link: Link) -> bool:
        row = cur.execute(
            self._sql(SELECT_STORED), (link.tenant_id, link.run_id, link.index)
        ).fetchone()
        return row is not None and tuple(row) == (link.prev_hash, link.hash, link.event_id)

    def rewind_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Set positions back or forward, past the fence (``runtrail offsets set``)."""
        with self._db.transaction() as cur:
            for (topic, partition), offset in offsets.items():
                self._tracking.rewind(cur, topic, {partition: offset})

    # --- reading ----------------------------------------------------------------------------
    def load_chain(self, tenant_id: str, run_id: str) -> list[Link]:
        rows = self._query(SELECT_CHAIN, (tenant_id, run_id))
        return [link_from_row(row, position) for position, row in enumerate(rows)]

    def summaries(self, tenant_id: str, run_id: str) -> list[LinkSummary]:
        try:
            rows = self._query(select_summaries(self.dialect), (tenant_id, run_id))
        except self.MALFORMED_JSON as exc:  # a row edited behind the store's back
            raise MalformedLink(f"a stored link of {tenant_id}/{run_id}: {exc}") from exc
        return [summary_from_row(row) for row in rows]

    def link_at(self, tenant_id: str, run_id: str, index: int) -> Link | None:
        rows = self._query(SELECT_LINK_AT, (tenant_id, run_id, index))
        return link_from_row(rows[0]) if rows else None

    def head(self, tenant_id: str, run_id: str) -> RunHead | None:
        rows = self._query(SELECT_HEAD, (tenant_id, run_id))
        if not rows:
            return None
        idx, hash_ = rows[0]
        return RunHead(tenant_id, run_id, int(idx) + 1, str(hash_))

    def heads(self) -> list[RunHead]:
        return order_heads(head_from_row(row) for row in self._query(SELECT_HEADS[self.dialect]))

    def find_event(self, tenant_id: str, event_id: str) -> Link | None:
        rows = self._query(SELECT_EVENT, (tenant_id, event_id))
        return link_from_row(rows[0]) if rows else None

    # --- tree heads -------------------------------------------------------------------------
    def save_tree_head(
        self, note: str, tree_head: TreeHead, heads: Sequence[RunHead]
    ) -> StoredTreeHead:
        ordered = order_heads(heads)
        if len(ordered) != tree_head.size:
            raise ValueError(f"{len(ordered)} heads for a tree head of size {tree_head.size}")
        created = datetime.now(UTC).isoformat()
        with self._db.transaction() as cur:
            tree_head_id = self._insert_tree_head(
                cur, (tree_head.origin, tree_head.size, tree_head.body(), note, created)
            )
            if ordered:
                self._insert_committed_heads(cur, tree_head_id, ordered)
        return StoredTreeHead(tree_head_id, tree_head, note, created)

    def latest_tree_head(self) -> StoredTreeHead | None:
        rows = self._query(SELECT_LATEST_TREE_HEAD)
        return stored_tree_head(rows[0]) if rows else None

    def get_tree_head(self, tree_head_id: int) -> StoredTreeHead | None:
        rows = self._query(SELECT_TREE_HEAD, (tree_head_id,))
        return stored_tree_head(rows[0]) if rows else None

    def find_tree_head(self, tree_head: TreeHead) -> StoredTreeHead | None:
        rows = self._query(SELECT_TREE_HEAD_BY_BODY, (tree_head.body(),))
        return stored_tree_head(rows[0]) if rows else None

    # --- the transparency log -----------------------------------------------------------
    def log_size(self) -> int:
        return int(self._query(SELECT_LOG_SIZE)[0][0])

    def log_entries(self, start: int, end: int) -> list[bytes]:
        rows = self._query(SELECT_LOG_ENTRIES, (start, end))
        return [bytes.fromhex(str(row[0])) for row in rows]

    def log_index(self, tenant_id: str, run_id: str, index: int) -> int | None:
        rows = self._query(SELECT_LOG_INDEX, (tenant_id, run_id, index))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def save_log_checkpoint(self, note: str, tree_head: TreeHead) -> StoredTreeHead:
        created = datetime.now(UTC).isoformat()
        with self._db.transaction() as cur:
            tree_head_id = self._insert_log_checkpoint(
                cur, (tree_head.size, tree_head.body(), note, created)
            )
        return StoredTreeHead(tree_head_id, tree_head, note, created)

    def latest_log_checkpoint(self) -> StoredTreeHead | None:
        rows = self._query(SELECT_LATEST_LOG_CHECKPOINT)
        return stored_tree_head(rows[0]) if rows else None

    def save_cosignatures(self, tree_head_id: int, lines: Mapping[str, str]) -> None:
        statement = self._sql(INSERT_COSIGNATURE[self.dialect])
        with self._db.transaction() as cur:
            for witness, line in sorted(lines.items()):
                cur.execute(statement, (tree_head_id, witness, line))

    def cosignatures(self, tree_head_id: int) -> dict[str, str]:
        rows = self._query(SELECT_COSIGNATURES, (tree_head_id,))
        return {str(witness): str(line) for witness, line in rows}

    def log_checkpoint_of_size(self, size: int) -> StoredTreeHead | None:
        rows = self._query(SELECT_LOG_CHECKPOINT_OF_SIZE, (size,))
        return stored_tree_head(rows[0]) if rows else None

    def committed_heads(self, tree_head_id: int) -> list[RunHead]:
        rows = self._query(SELECT_COMMITTED_HEADS, (tree_head_id,))
        return [RunHead(str(t), str(r), int(n), str(h)) for t, r, n, h in rows]
