"""The PostgreSQL session store (psycopg 3): one row per session, behind ``postgresql://…``.

The Java original deletes then inserts without a transaction, so a crash between the two
loses the snapshot. Here a save is one statement in one transaction — an upsert whose update
only applies when the stored row holds no more events than the new snapshot:

    INSERT … ON CONFLICT (tenant_id, session_id) DO UPDATE SET …
    WHERE runtrail_sessions.revision <= EXCLUDED.revision

PostgreSQL locks the conflicting row and re-checks that condition against its latest version,
so concurrent saves of one session serialise and the newest stays, whatever order they commit
in. The snapshot is stored as text, the exact canonical bytes its digest was taken over (not
``jsonb``, which would re-format it); ``revision`` and ``digest`` are copied into columns so
the conditions need not parse it, and are checked against it on load.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.postgres import Connection
from runtrail.sessions.errors import CorruptSnapshot
from runtrail.sessions.pg import PostgresBacked
from runtrail.sessions.snapshot import AgentSessionSnapshot, parse_snapshot, verified_digest
from runtrail.sessions.store import AgentSessionStore, SessionIds, SessionSummary, Summaries

TABLE = "runtrail_sessions"

#: Migration 1 is the first table (``IF NOT EXISTS``: a store that predates migrations is adopted).
_FIRST_TABLE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    revision BIGINT NOT NULL CHECK (revision >= 0),
    code_version TEXT NOT NULL,
    digest TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id)
)
"""

MIGRATIONS = Component("sessions", (Migration(1, "the sessions table", (_FIRST_TABLE,)),))

_COLUMNS = "tenant_id, session_id, revision, code_version, digest, snapshot, updated_at"
_VALUES = "%s, %s, %s, %s, %s, %s, clock_timestamp()"
_SET = (
    "revision = EXCLUDED.revision, code_version = EXCLUDED.code_version, "
    "digest = EXCLUDED.digest, snapshot = EXCLUDED.snapshot, updated_at = EXCLUDED.updated_at"
)

_UPSERT_NEWEST = f"""
INSERT INTO {TABLE} ({_COLUMNS}) VALUES ({_VALUES})
ON CONFLICT (tenant_id, session_id) DO UPDATE SET {_SET}
WHERE {TABLE}.revision <= EXCLUDED.revision
"""
_INSERT_IF_ABSENT = f"""
INSERT INTO {TABLE} ({_COLUMNS}) VALUES ({_VALUES})
ON CONFLICT (tenant_id, session_id) DO NOTHING
"""
_REPLACE_IF_DIGEST = f"""
UPDATE {TABLE} SET revision = %s, code_version = %s, digest = %s, snapshot = %s,
    updated_at = clock_timestamp()
WHERE tenant_id = %s AND session_id = %s AND digest = %s
"""
_SELECT = f"SELECT revision, digest, snapshot FROM {TABLE} WHERE tenant_id = %s AND session_id = %s"
_SELECT_FOR_UPDATE = (
    f"SELECT digest, snapshot FROM {TABLE} WHERE tenant_id = %s AND session_id = %s FOR UPDATE"
)
_LIST = f"""
SELECT tenant_id, session_id,
       to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
FROM {TABLE} {{where}} ORDER BY tenant_id, session_id
"""
_DELETE = f"DELETE FROM {TABLE} WHERE tenant_id = %s AND session_id = %s"
#: ``?|``: whether the JSON object has any of the keys (the runs the snapshot applied)
_HOLDING = f"""
SELECT session_id FROM {TABLE}
WHERE tenant_id = %(tenant)s AND (
    (snapshot::json -> 'lastAppliedSequence')::jsonb ?| %(runs)s::text[]
    OR (%(text)s::text <> '' AND strpos(snapshot, %(text)s::text) > 0)
)
ORDER BY session_id
"""


class PostgresSessionStore(PostgresBacked, AgentSessionStore):
    """Session snapshots as rows of ``runtrail_sessions``. Thread-safe (pooled connections)."""

    what = "session store"
    component = MIGRATIONS

    # --- writing ------------------------------------------------------------------------------
    def save(self, snapshot: AgentSessionSnapshot) -> bool:
        row = _row(snapshot)

        def work(conn: Connection) -> bool:
            with conn.transaction():
                return conn.execute(_UPSERT_NEWEST, row).rowcount == 1

        return self._db.run(work)

    def save_if(self, snapshot: AgentSessionSnapshot, expected_digest: str | None) -> bool:
        where = self.row_name(snapshot.tenant_id, snapshot.session_id)
        key = (snapshot.tenant_id, snapshot.session_id)

        def work(conn: Connection) -> bool:
            with conn.transaction():
                found = conn.execute(_SELECT_FOR_UPDATE, key).fetchone()  # locks the row
                if found is None:
                    if expected_digest is not None:
                        return False
                    return conn.execute(_INSERT_IF_ABSENT, _row(snapshot)).rowcount == 1
                column, text = found
                # the stored CONTENT is checked, not only the digest column: an edited row
                # raises CorruptSnapshot here and stays as it is (the evidence is kept)
                stored = verified_digest(str(text), where)
                if column != stored:
                    raise CorruptSnapshot(
                        where, f"digest column {column}, the snapshot's digest {stored}"
                    )
                if stored != expected_digest:
                    return False
                conn.execute(
                    _REPLACE_IF_DIGEST,
                    (
                        snapshot.revision,
                        snapshot.code_version,
                        snapshot.digest,
                        snapshot.to_bytes().decode(),
                        *key,
                        expected_digest,
                    ),
                )
                return True

        return self._db.run(work)

    def delete(self, tenant_id: str, session_id: str) -> bool:
        def work(conn: Connection) -> bool:
            with conn.transaction():
                return conn.execute(_DELETE, (tenant_id, session_id)).rowcount == 1

        return self._db.run(work)

    # --- reading ------------------------------------------------------------------------------
    def sessions_holding(
        self, tenant_id: str, runs: Collection[str], text: str | None = None
    ) -> SessionIds:
        params = {"tenant": tenant_id, "runs": list(runs), "text": text or ""}
        return [str(row[0]) for row in self._db.rows(_HOLDING, params)]

    def row_name(self, tenant_id: str, session_id: str) -> str:
        """How errors name a row: table, key and database."""
        return (
            f"{TABLE} row (tenant_id={tenant_id!r}, session_id={session_id!r}) in {self._db.where}"
        )

    def load(self, tenant_id: str, session_id: str) -> AgentSessionSnapshot | None:
        found = self._db.row(_SELECT, (tenant_id, session_id))
        if found is None:
            return None
        revision, digest, text = found
        where = self.row_name(tenant_id, session_id)
        snapshot = parse_snapshot(text, where)
        if (snapshot.tenant_id, snapshot.session_id) != (tenant_id, session_id):
            raise CorruptSnapshot(
                where, f"holds session {snapshot.tenant_id}/{snapshot.session_id}"
            )
        if (revision, digest) != (snapshot.revision, snapshot.digest):
            raise CorruptSnapshot(
                where,
                f"columns say revision {revision} digest {digest}, the snapshot "
                f"{snapshot.revision} {snapshot.digest}",
            )
        return snapshot

    def list(self, tenant_id: str | None = None) -> Summaries:
        params: tuple[str, ...] = ()
        if tenant_id is None:
            query = _LIST.format(where="")
        else:
            query, params = _LIST.format(where="WHERE tenant_id = %s"), (tenant_id,)
        rows = self._db.rows(query, params)
        return [SessionSummary(str(t), str(s), str(u)) for t, s, u in rows]


def _row(snapshot: AgentSessionSnapshot) -> tuple[Any, ...]:
    return (
        snapshot.tenant_id,
        snapshot.session_id,
        snapshot.revision,
        snapshot.code_version,
        snapshot.digest,
        snapshot.to_bytes().decode(),
    )
