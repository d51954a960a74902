"""The projection store's SQL, portable between SQLite and PostgreSQL.

Statements use ``?`` placeholders (sqlite3); an adapter for a driver with another paramstyle
rewrites them (``%s`` for psycopg). Upserts use ``INSERT … ON CONFLICT … DO UPDATE … WHERE``,
which both databases support; the ``WHERE`` clauses are the store's fences.
"""

from __future__ import annotations

SCHEMA: tuple[str, ...] = (
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

#: Fenced: never over a halted run, never to a lower version (an equal one rewrites, idempotent).
UPSERT_PROJECTION = """
INSERT INTO projections (tenant_id, run_id, status, version, projector_version, state, halted)
VALUES (?, ?, ?, ?, ?, ?, FALSE)
ON CONFLICT (tenant_id, run_id) DO UPDATE SET
    status = excluded.status,
    version = excluded.version,
    projector_version = excluded.projector_version,
    state = excluded.state
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

#: Fenced: an offset only moves forward.
UPSERT_OFFSET = """
INSERT INTO consumer_offsets (topic, partition_id, next_offset) VALUES (?, ?, ?)
ON CONFLICT (topic, partition_id) DO UPDATE SET next_offset = excluded.next_offset
WHERE consumer_offsets.next_offset <= excluded.next_offset
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
SELECT_OFFSET = "SELECT next_offset FROM consumer_offsets WHERE topic = ? AND partition_id = ?"
SELECT_OFFSETS = "SELECT partition_id, next_offset FROM consumer_offsets WHERE topic = ?"
SELECT_SNAPSHOT = """SELECT projector_version, last_applied_sequence, state
FROM projection_snapshots WHERE tenant_id = ? AND run_id = ?"""
