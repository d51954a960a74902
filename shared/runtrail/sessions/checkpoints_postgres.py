"""Checkpoint records as rows of ``runtrail_thread_records``, beside ``runtrail_sessions``.

One row per record, keyed by the record's full key (tenant first). A :meth:`put` of many rows
is one transaction, so a checkpoint and the channel values it introduced appear together or not
at all. The record is stored as text, the exact canonical bytes its digest was taken over (not
``jsonb``, which would re-format it); ``digest`` is copied into a column for operators. The key
columns are ``COLLATE "C"``, so "the newest checkpoint" is an index lookup in code-point order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.postgres import Connection
from runtrail.sessions.checkpoints import CheckpointBackend, Key, Prefix, Row
from runtrail.sessions.pg import PostgresBacked

TABLE = "runtrail_thread_records"
_KEY = "tenant_id, thread_id, kind, ns, k1, k2, k3"

#: Migration 1 is the first table (``IF NOT EXISTS``: a store that predates migrations is adopted).
_FIRST_TABLE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    tenant_id TEXT COLLATE "C" NOT NULL,
    thread_id TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    ns TEXT COLLATE "C" NOT NULL,
    k1 TEXT COLLATE "C" NOT NULL,
    k2 TEXT COLLATE "C" NOT NULL,
    k3 TEXT COLLATE "C" NOT NULL,
    digest TEXT NOT NULL,
    record TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY ({_KEY})
)
"""
MIGRATIONS = Component(
    "checkpoints", (Migration(1, "the checkpoint records table", (_FIRST_TABLE,)),)
)

_INSERT = f"""
INSERT INTO {TABLE} ({_KEY}, digest, record) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT ({_KEY}) DO {{action}}
"""
_REPLACE = _INSERT.format(
    action="UPDATE SET digest = EXCLUDED.digest, record = EXCLUDED.record, "
    "updated_at = clock_timestamp()"
)
_KEEP = _INSERT.format(action="NOTHING")
_WHERE_KEY = "tenant_id = %s AND thread_id = %s AND kind = %s AND ns = %s AND k1 = %s " + (
    "AND k2 = %s AND k3 = %s"
)
_SELECT = f"SELECT record FROM {TABLE} WHERE {_WHERE_KEY}"
_DELETE = f"DELETE FROM {TABLE} WHERE {_WHERE_KEY}"
_DELETE_THREAD = f"DELETE FROM {TABLE} WHERE tenant_id = %s AND thread_id = %s"
_NEWEST = f"""
SELECT k1 FROM {TABLE} WHERE tenant_id = %s AND thread_id = %s AND kind = %s AND ns = %s
ORDER BY k1 DESC LIMIT 1
"""
_MANY = f"""
SELECT {_KEY}, record FROM {TABLE}
WHERE tenant_id = %s AND thread_id = %s AND kind = %s AND ns = %s
  AND (k1, k2, k3) IN (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))
"""
_THREADS = f"SELECT DISTINCT thread_id FROM {TABLE} WHERE tenant_id = %s AND kind = 'checkpoint'"
_TENANTS = f"SELECT DISTINCT tenant_id FROM {TABLE} WHERE kind = 'checkpoint'"


class PostgresCheckpointBackend(PostgresBacked, CheckpointBackend):
    """Sealed checkpoint records in PostgreSQL. Thread-safe (pooled connections)."""

    what = "checkpoint store"
    component = MIGRATIONS

    def locate(self, key: Key) -> str:
        return self.row_name(key)

    def row_name(self, key: Key) -> str:
        """How errors name a row: table, key and database."""
        return f"{TABLE} row {key!r} in {self._db.where}"

    # --- writing ------------------------------------------------------------------------------
    def put(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        replace = [(*r.key, _digest(r.data), r.data.decode()) for r in rows if r.replace]
        keep = [(*r.key, _digest(r.data), r.data.decode()) for r in rows if not r.replace]

        def work(conn: Connection) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                if keep:
                    cursor.executemany(_KEEP, keep)
                if replace:
                    cursor.executemany(_REPLACE, replace)

        self._db.run(work)

    def delete(self, keys: Sequence[Key]) -> None:
        if not keys:
            return

        def work(conn: Connection) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(_DELETE, [tuple(k) for k in keys])

        self._db.run(work)

    def delete_thread(self, tenant: str, thread: str) -> None:
        def work(conn: Connection) -> None:
            with conn.transaction():
                conn.execute(_DELETE_THREAD, (tenant, thread))

        self._db.run(work)

    # --- reading ------------------------------------------------------------------------------
    def get(self, key: Key) -> tuple[str, bytes] | None:
        found = self._db.row(_SELECT, key)
        return None if found is None else (self.row_name(key), str(found[0]).encode())

    def newest(self, tenant: str, kind: str, thread: str, ns: str) -> str | None:
        # The key columns are COLLATE "C": code-point order, as Python compares the IDs, and
        # the primary key's index serves this ORDER BY … LIMIT 1.
        found = self._db.row(_NEWEST, (tenant, thread, kind, ns))
        return None if found is None else str(found[0])

    def get_many(self, keys: Sequence[Key]) -> dict[Key, tuple[str, bytes]]:
        groups: dict[tuple[str, str, str, str], list[Key]] = {}
        for wanted in keys:
            groups.setdefault(wanted[:4], []).append(wanted)

        def work(conn: Connection) -> list[tuple[Any, ...]]:
            rows: list[tuple[Any, ...]] = []
            for prefix, share in groups.items():
                parts = ([k[4] for k in share], [k[5] for k in share], [k[6] for k in share])
                rows.extend(conn.execute(_MANY, (*prefix, *parts)).fetchall())
            return rows

        found: dict[Key, tuple[str, bytes]] = {}
        for r in self._db.run(work) if groups else []:
            key: Key = (r[0], r[1], r[2], r[3], r[4], r[5], r[6])
            found[key] = (self.row_name(key), str(r[7]).encode())
        return found

    def scan(self, prefix: Prefix) -> list[tuple[str, bytes]]:
        tenant, kind, thread, ns, a = prefix
        conditions = ["tenant_id = %s", "kind = %s"]
        params: list[str] = [tenant, kind]
        for column, value in (("thread_id", thread), ("ns", ns), ("k1", a)):
            if value is not None:
                conditions.append(f"{column} = %s")
                params.append(value)
        query = f"SELECT {_KEY}, record FROM {TABLE} WHERE {' AND '.join(conditions)}"
        rows = self._db.rows(query, params)
        return [
            (self.row_name((r[0], r[1], r[2], r[3], r[4], r[5], r[6])), str(r[7]).encode())
            for r in rows
        ]

    def threads(self, tenant: str) -> list[str]:
        rows = self._db.rows(_THREADS, (tenant,))
        return sorted(str(r[0]) for r in rows)

    def tenants(self) -> list[str]:
        return sorted(str(r[0]) for r in self._db.rows(_TENANTS, ()))


def _digest(data: bytes) -> str:
    """The digest a sealed record names (for the column; verification reads the record)."""
    return str(orjson.loads(data)["digest"])
