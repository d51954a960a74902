"""The resume-cache store's tables, migrations and statements, once for both SQL adapters.

:class:`SqlCacheStore` implements :class:`~runtrail.resume.store.CacheStore` on a
:mod:`runtrail.persistence` database (an :class:`~runtrail.persistence.sqlite.SqliteDatabase`
or a :class:`~runtrail.persistence.postgres.PostgresDatabase`); the adapter modules
(:mod:`.store_sqlite`, :mod:`.store_postgres`) only open the database. Statements are written
with ``?`` placeholders and turned into ``%s`` for PostgreSQL.

What a flush changed — entries, intents opened or closed, open model nodes, run sequences — is
written in **one transaction together with the consumed positions** (the tracking table,
:mod:`runtrail.persistence.tracking`: positions never move back, a rewind is explicit), and the
service starts each partition from the positions stored here: exactly-once into the store,
whatever the crash. Entries are first-wins (``ON CONFLICT DO NOTHING``): a replayed run always
gets what its first attempt got.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from runtrail.persistence.dialect import Database, Dialect, placeholders
from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.tracking import TRACKING, Tracking, offsets_into_tracking
from runtrail.resume.builder import ModelNode, WriteBatch
from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.keys import Kind, Scope
from runtrail.resume.store import (
    CacheErasure,
    CacheStore,
    ErasedRows,
    StoredEntryKey,
)

#: The component name of the resume-cache's migrations and positions.
COMPONENT = "resume-cache"

#: Migration 1: the first tables (``IF NOT EXISTS``: a store that predates migrations is adopted).
_FIRST_TABLES = (
    """CREATE TABLE IF NOT EXISTS rc_entries (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        body TEXT NOT NULL,
        written_ms BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, kind, key))""",
    "CREATE INDEX IF NOT EXISTS rc_entries_by_tenant ON rc_entries (tenant_id, kind, key, written_ms)",
    """CREATE TABLE IF NOT EXISTS rc_intents (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        intent_id TEXT NOT NULL,
        key TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, intent_id))""",
    "CREATE INDEX IF NOT EXISTS rc_intents_by_key ON rc_intents (tenant_id, run_id, key)",
    "CREATE INDEX IF NOT EXISTS rc_intents_by_partition ON rc_intents (topic, partition)",
    """CREATE TABLE IF NOT EXISTS rc_models (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        node_id TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, node_id))""",
    "CREATE INDEX IF NOT EXISTS rc_models_by_partition ON rc_models (topic, partition)",
    """CREATE TABLE IF NOT EXISTS rc_runs (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        last_sequence BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, run_id))""",
    """CREATE TABLE IF NOT EXISTS rc_offsets (
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        next_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition))""",
)


MIGRATIONS = Component(
    COMPONENT,
    (
        Migration(1, "the first tables", _FIRST_TABLES),
        offsets_into_tracking(COMPONENT, "rc_offsets", "partition"),
    ),
)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode("utf-8")


def _node_id(node: ModelNode) -> str:
    return f"{node.turn_id or ''}|{'' if node.step is None else node.step}"


class SqlCacheStore(CacheStore):
    """:class:`CacheStore` on one database; ``reads`` serves the lookups (the HTTP threads):
    another handle on the same database, so they never wait for the consume loop's writes."""

    def __init__(self, db: Database, *, reads: Database | None = None) -> None:
        self.dialect: Dialect = db.dialect
        self._db = db
        self._reads = reads if reads is not None else db
        self._tracking = Tracking(COMPONENT, db.dialect)
        db.migrate((TRACKING, MIGRATIONS))

    # --- plumbing -------------------------------------------------------------------------
    def _sql(self, statement: str) -> str:
        return placeholders(statement, self.dialect)

    def _query(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._reads.query(self._sql(statement), params)

    # --- the write path -------------------------------------------------------------------
    def apply(self, batch: WriteBatch, topic: str, erasures: Sequence[CacheErasure] = ()) -> None:
        """Make one flush's changes and offsets durable, atomically; ``erasures`` first (what
        the batch holds of an erased run was dropped before it was built, so what it holds
        now came after the erasure)."""
        if not batch and not erasures:
            return
        now = time.time_ns() // 1_000_000
        greatest = "MAX" if self.dialect == "sqlite" else "GREATEST"
        with self._db.transaction() as cur:
            for erasure in erasures:
                self._erase_in(cur, erasure)
            if batch.entries:
                cur.executemany(
                    self._sql(
                        "INSERT INTO rc_entries (tenant_id, run_id, kind, key, body, written_ms) "
                        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                    ),
                    [
                        (e.tenant_id, e.run_id, e.kind.value, e.key, _dumps(e.to_json()), now)
                        for e in batch.entries.values()
                    ],
                )
            opened = [v for v in batch.intents.values() if v is not None]
            closed = [k for k, v in batch.intents.items() if v is None]
            if closed:
                cur.executemany(
                    self._sql(
                        "DELETE FROM rc_intents WHERE tenant_id = ? AND run_id = ? AND intent_id = ?"
                    ),
                    closed,
                )
            if opened:
                cur.executemany(
                    self._sql(
                        "INSERT INTO rc_intents (tenant_id, run_id, intent_id, key, topic, "
                        "partition, body) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, "
                        "run_id, intent_id) DO UPDATE SET key = excluded.key, topic = "
                        "excluded.topic, partition = excluded.partition, body = excluded.body"
                    ),
                    [
                        (i.tenant_id, i.run_id, i.intent_id, i.key, topic, p, _dumps(i.to_json()))
                        for i, p in opened
                    ],
                )
            gone = [
                (k[0], k[1], f"{k[2]}|{'' if k[3] is None else k[3]}")
                for k, n in batch.models.items()
                if n is None
            ]
            live = [n for n in batch.models.values() if n is not None]
            if gone:
                cur.executemany(
                    self._sql(
                        "DELETE FROM rc_models WHERE tenant_id = ? AND run_id = ? AND node_id = ?"
                    ),
                    gone,
                )
            if live:
                cur.executemany(
                    self._sql(
                        "INSERT INTO rc_models (tenant_id, run_id, node_id, topic, partition, "
                        "body) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, run_id, node_id) "
                        "DO UPDATE SET topic = excluded.topic, partition = excluded.partition, "
                        "body = excluded.body"
                    ),
                    [
                        (
                            n.tenant_id,
                            n.run_id,
                            _node_id(n),
                            topic,
                            n.partition,
                            _dumps(n.to_json()),
                        )
                        for n in live
                    ],
                )
            if batch.runs:
                cur.executemany(
                    self._sql(
                        "INSERT INTO rc_runs (tenant_id, run_id, last_sequence) VALUES (?, ?, ?) "
                        "ON CONFLICT (tenant_id, run_id) DO UPDATE SET last_sequence = "
                        f"{greatest}(rc_runs.last_sequence, excluded.last_sequence)"
                    ),
                    [(t, r, seq) for (t, r), (seq, _) in batch.runs.items()],
                )
            if batch.offsets:
                self._tracking.record(cur, batch.offsets)

    def holding(self, erasure: CacheErasure) -> ErasedRows:
        if not erasure:
            return ErasedRows()
        where, params = self._covering(erasure)
        entries = self._query(
            f"SELECT tenant_id, run_id, kind, key FROM rc_entries WHERE {where}", params
        )
        intents = self._query(
            f"SELECT tenant_id, run_id, intent_id FROM rc_intents WHERE {where}", params
        )
        models = self._query(f"SELECT COUNT(*) FROM rc_models WHERE {where}", params)
        return ErasedRows(
            [(str(t), str(r), str(k), str(key)) for t, r, k, key in entries],
            [(str(t), str(r), str(i)) for t, r, i in intents],
            int(models[0][0]) if models else 0,
        )

    def erase(self, erasure: CacheErasure) -> ErasedRows:
        if not erasure:
            return ErasedRows()
        with self._db.transaction() as cur:
            return self._erase_in(cur, erasure)

    def _erase_in(self, cur: Any, erasure: CacheErasure) -> ErasedRows:
        """Delete what ``erasure`` covers in the open transaction; what was deleted."""
        if not erasure:
            return ErasedRows()
        where, params = self._covering(erasure)
        erased = ErasedRows()
        cur.execute(
            self._sql(f"SELECT tenant_id, run_id, kind, key FROM rc_entries WHERE {where}"), params
        )
        erased.entries = [(str(t), str(r), str(k), str(key)) for t, r, k, key in cur.fetchall()]
        cur.execute(
            self._sql(f"SELECT tenant_id, run_id, intent_id FROM rc_intents WHERE {where}"), params
        )
        erased.intents = [(str(t), str(r), str(i)) for t, r, i in cur.fetchall()]
        for table in ("rc_entries", "rc_intents"):
            cur.execute(self._sql(f"DELETE FROM {table} WHERE {where}"), params)
        cur.execute(self._sql(f"DELETE FROM rc_models WHERE {where}"), params)
        erased.models = max(cur.rowcount, 0)
        return erased

    def _covering(self, erasure: CacheErasure) -> tuple[str, list[Any]]:
        """The condition on a table's ``tenant_id``, ``run_id`` and ``body`` that selects what
        ``erasure`` covers, with its parameters."""
        params: list[Any] = [erasure.tenant]
        covered: list[str] = []
        if erasure.runs:
            covered.append(f"run_id IN ({', '.join('?' for _ in erasure.runs)})")
            params.extend(erasure.runs)
        if erasure.marker is not None:
            contains = "instr(body, ?)" if self.dialect == "sqlite" else "strpos(body, ?)"
            covered.append(f"{contains} > 0")
            params.append(erasure.marker)
        return f"tenant_id = ? AND ({' OR '.join(covered)})", params

    def import_entries(self, entries: Iterable[CacheEntry]) -> int:
        """Insert entries (first wins); returns how many were new."""
        rows = [
            (
                e.tenant_id,
                e.run_id,
                e.kind.value,
                e.key,
                _dumps(e.to_json()),
                time.time_ns() // 1_000_000,
            )
            for e in entries
        ]
        with self._db.transaction() as cur:
            before = self._count(cur)
            cur.executemany(
                self._sql(
                    "INSERT INTO rc_entries (tenant_id, run_id, kind, key, body, written_ms) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                ),
                rows,
            )
            return self._count(cur) - before

    def import_intents(
        self, intents: Iterable[Intent], topic: str, partition_of: Callable[[str], int]
    ) -> int:
        """Insert open intents (first wins); returns how many were new.

        Each is filed under the events-topic partition of its run (``partition_of(run_id)``),
        because that is where the service looks for open state on assignment: a TOOL_RESULT
        consumed later closes the imported intent like one it had seen itself.
        """
        rows = [
            (
                i.tenant_id,
                i.run_id,
                i.intent_id,
                i.key,
                topic,
                partition_of(i.run_id),
                _dumps(i.to_json()),
            )
            for i in intents
        ]
        with self._db.transaction() as cur:
            before = self._count(cur, "rc_intents")
            cur.executemany(
                self._sql(
                    "INSERT INTO rc_intents (tenant_id, run_id, intent_id, key, topic, partition, "
                    "body) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                ),
                rows,
            )
            return self._count(cur, "rc_intents") - before

    def _count(self, cur: Any, table: str = "rc_entries") -> int:
        cur.execute(f"SELECT COUNT(*) FROM {table}")
        row = cur.fetchone()
        return int(row[0]) if row else 0

    # --- restart --------------------------------------------------------------------------
    def offsets(self, topic: str) -> dict[int, int]:
        """Per partition, the next offset to consume (what was made durable)."""
        rows = self._query(
            "SELECT partition, next_offset FROM runtrail_positions WHERE component = ? "
            "AND topic = ?",
            [COMPONENT, topic],
        )
        return {int(p): int(o) for p, o in rows}

    def rewind_offsets(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets per partition, back or forward (``runtrail offsets set``): the
        service starts there on its next assignment. Open state stays as it is."""
        with self._db.transaction() as cur:
            self._tracking.rewind(cur, topic, offsets)

    def open_state(
        self, topic: str, partitions: Sequence[int]
    ) -> tuple[list[ModelNode], list[tuple[Intent, int]]]:
        """The open model nodes and intents of these partitions, to resume building."""
        if not partitions:
            return [], []
        marks = ", ".join("?" for _ in partitions)
        models = self._query(
            f"SELECT body FROM rc_models WHERE topic = ? AND partition IN ({marks})",
            [topic, *partitions],
        )
        intents = self._query(
            f"SELECT body, partition FROM rc_intents WHERE topic = ? AND partition IN ({marks})",
            [topic, *partitions],
        )
        return (
            [ModelNode.from_json(orjson.loads(b)) for (b,) in models],
            [(Intent.from_json(orjson.loads(b)), int(p)) for b, p in intents],
        )

    # --- lookups --------------------------------------------------------------------------
    def get_entry(
        self, tenant: str, run_id: str, kind: Kind, key: str, scope: Scope = Scope.RUN
    ) -> CacheEntry | None:
        if scope is Scope.RUN:
            rows = self._query(
                "SELECT body FROM rc_entries WHERE tenant_id = ? AND run_id = ? AND kind = ? "
                "AND key = ?",
                [tenant, run_id, kind.value, key],
            )
        else:
            rows = self._query(
                "SELECT body FROM rc_entries WHERE tenant_id = ? AND kind = ? AND key = ? "
                "ORDER BY written_ms DESC LIMIT 1",
                [tenant, kind.value, key],
            )
        return CacheEntry.from_json(orjson.loads(rows[0][0])) if rows else None

    def get_intent(self, tenant: str, run_id: str, key: str) -> Intent | None:
        rows = self._query(
            "SELECT body FROM rc_intents WHERE tenant_id = ? AND run_id = ? AND key = ? LIMIT 1",
            [tenant, run_id, key],
        )
        return Intent.from_json(orjson.loads(rows[0][0])) if rows else None

    def run_state(self, tenant: str, run_id: str) -> RunState:
        seq = self._query(
            "SELECT last_sequence FROM rc_runs WHERE tenant_id = ? AND run_id = ?", [tenant, run_id]
        )
        intents = self._query(
            "SELECT body FROM rc_intents WHERE tenant_id = ? AND run_id = ? ORDER BY intent_id",
            [tenant, run_id],
        )
        return RunState(
            tenant,
            run_id,
            int(seq[0][0]) if seq else 0,
            tuple(Intent.from_json(orjson.loads(b)) for (b,) in intents),
        )

    def entries(self, tenant: str | None = None, run_id: str | None = None) -> list[CacheEntry]:
        if run_id is not None:
            if tenant is None:
                raise ValueError("a run's entries need its tenant")
            rows = self._query(
                "SELECT body FROM rc_entries WHERE tenant_id = ? AND run_id = ? ORDER BY kind, key",
                [tenant, run_id],
            )
            return [CacheEntry.from_json(orjson.loads(b)) for (b,) in rows]
        return [
            CacheEntry.from_json(b) for b in self._bodies("rc_entries", "run_id, kind, key", tenant)
        ]

    def entries_written_before(self, cutoff_ms: int) -> list[StoredEntryKey]:
        rows = self._query(
            "SELECT tenant_id, run_id, kind, key FROM rc_entries WHERE written_ms < ?",
            [cutoff_ms],
        )
        return [(str(t), str(r), str(k), str(key)) for t, r, k, key in rows]

    def delete_entries(self, keys: Sequence[StoredEntryKey]) -> int:
        statement = self._sql(
            "DELETE FROM rc_entries WHERE tenant_id = ? AND run_id = ? AND kind = ? AND key = ?"
        )
        deleted = 0
        with self._db.transaction() as cur:
            for key in keys:
                cur.execute(statement, list(key))
                deleted += max(cur.rowcount, 0)
        return deleted

    def intents(self, tenant: str | None = None) -> list[Intent]:
        return [
            Intent.from_json(b) for b in self._bodies("rc_intents", "run_id, intent_id", tenant)
        ]

    def _bodies(self, table: str, order: str, tenant: str | None) -> list[Any]:
        """The parsed bodies of ``table``: of ``tenant``, or of every tenant in tenant order,
        then ordered by ``order``."""
        if tenant is None:
            rows = self._query(f"SELECT body FROM {table} ORDER BY tenant_id, {order}", [])
        else:
            rows = self._query(
                f"SELECT body FROM {table} WHERE tenant_id = ? ORDER BY {order}", [tenant]
            )
        return [orjson.loads(b) for (b,) in rows]

    def stats(self) -> dict[str, Any]:
        """Counts per tenant and kind, open intents and model nodes, runs, offsets."""
        per: dict[str, dict[str, int]] = {}
        for tenant, kind, count in self._query(
            "SELECT tenant_id, kind, COUNT(*) FROM rc_entries GROUP BY tenant_id, kind", []
        ):
            per.setdefault(str(tenant), {})[str(kind)] = int(count)
        for tenant, count in self._query(
            "SELECT tenant_id, COUNT(*) FROM rc_intents GROUP BY tenant_id", []
        ):
            per.setdefault(str(tenant), {})["openIntents"] = int(count)
        for tenant, count in self._query(
            "SELECT tenant_id, COUNT(*) FROM rc_runs GROUP BY tenant_id", []
        ):
            per.setdefault(str(tenant), {})["runs"] = int(count)
        open_models = self._query("SELECT COUNT(*) FROM rc_models", [])
        offsets: dict[str, dict[str, int]] = {}
        for topic, partition, offset in self._query(
            "SELECT topic, partition, next_offset FROM runtrail_positions WHERE component = ? "
            "ORDER BY topic, partition",
            [COMPONENT],
        ):
            offsets.setdefault(str(topic), {})[str(partition)] = int(offset)
        return {
            "tenants": per,
            "openModelNodes": int(open_models[0][0]) if open_models else 0,
            "offsets": offsets,
        }

    def close(self) -> None:
        if self._reads is not self._db:
            self._reads.close()
        self._db.close()
