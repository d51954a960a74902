"""The OTLP drops store: what ingest did not record, per tenant, run and reason, with counts.

One row per (tenant, run, reason): how many spans or log records, when first and last seen,
and one span name as a sample. Written per batch by whoever decided the drop — the receiver
mapping in its own process (``otlp-ingest`` in mode ``map``), a forwarding receiver (log
records it can tell alone will never join a span), the scaled-out mapper (``otlp-mapper``) —
as an upsert that adds counts, so any number of processes share one store (PostgreSQL, or the
embedded SQLite file for processes of one host). A drop of no run (a log record with no span
context) has the run ID ``""``.

Exactly once from the mapper: a mapper reads the raw topic again after a crash or rebalance
and maps the same records the same way, so it would count their drops again. Its writes
(:meth:`SqlDropStore.add_positioned`) carry each batch's raw-topic offset and record, in the
same transaction, the next offset counted per partition (the tracking table,
:mod:`runtrail.persistence.tracking`, component ``otlp-drops``): a batch below it was counted
already and is skipped, also when it comes from a mapper that lost the partition meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtrail.camel_json import camel_fields
from runtrail.drops.tally import DropTally
from runtrail.persistence.database import open_database
from runtrail.persistence.dialect import Database, Dialect, placeholders
from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.tracking import TRACKING, Tracking

COMPONENT = "otlp-drops"

_TABLES = (
    """CREATE TABLE IF NOT EXISTS otlp_drops (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        count BIGINT NOT NULL,
        sample TEXT NOT NULL,
        first_seen_ms BIGINT NOT NULL,
        last_seen_ms BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, reason))""",
    "CREATE INDEX IF NOT EXISTS otlp_drops_by_time ON otlp_drops (tenant_id, last_seen_ms)",
)
MIGRATIONS = Component(COMPONENT, (Migration(1, "the drops table", _TABLES),))

_UPSERT = (
    "INSERT INTO otlp_drops (tenant_id, run_id, reason, count, sample, first_seen_ms, "
    "last_seen_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, run_id, reason) "
    "DO UPDATE SET count = otlp_drops.count + excluded.count, "
    "last_seen_ms = excluded.last_seen_ms"
)
_COLUMNS = "tenant_id, run_id, reason, count, sample, first_seen_ms, last_seen_ms"

#: (raw-topic offset, or None for a drop decided by the clock; tenant; the batch's tally)
PositionedTally = tuple[int | None, str, DropTally]


@dataclass(frozen=True)
class DropRow:
    tenant_id: str
    #: the run (= OTel trace ID); ``""``: the record belonged to no run
    run_id: str
    reason: str
    count: int
    sample: str
    first_seen_ms: int
    last_seen_ms: int

    def as_json(self) -> dict[str, Any]:
        return camel_fields(self, run_id=self.run_id or None)


class SqlDropStore:
    """The drops store on one :mod:`runtrail.persistence` database (SQLite or PostgreSQL),
    opened with :data:`TRACKING` and :data:`MIGRATIONS` applied (:func:`open_url`)."""

    def __init__(self, db: Database) -> None:
        self.dialect: Dialect = db.dialect
        self._db = db
        self._tracking = Tracking(COMPONENT, db.dialect)

    def _sql(self, statement: str) -> str:
        return placeholders(statement, self.dialect)

    def _upsert(self, cur: Any, tenant: str, tally: DropTally, now_ms: int) -> None:
        cur.executemany(
            self._sql(_UPSERT),
            [
                (tenant, trace_id, reason, found.count, found.sample[:200], now_ms, now_ms)
                for (trace_id, reason), found in sorted(tally.counts.items())
            ],
        )

    def add(self, tenant: str, tally: DropTally) -> None:
        """Add one batch's drops (a receiver's: nothing it decides is decided again)."""
        if not tally:
            return
        with self._db.transaction() as cur:
            self._upsert(cur, tenant, tally, _now_ms())

    def add_positioned(self, topic: str, batches: Mapping[int, Sequence[PositionedTally]]) -> None:
        """Add the mapper's batches per partition of the raw ``topic``; a batch whose offset
        is below the partition's counted position was counted already and is skipped."""
        if not any(batches.values()):
            return
        now = _now_ms()
        with self._db.transaction() as cur:
            counted = self._tracking.read(cur, topic, list(batches))
            advanced: dict[tuple[str, int], int] = {}
            for partition, positioned in sorted(batches.items()):
                start = counted.get(partition, 0)
                for offset, tenant, tally in positioned:
                    if offset is not None and offset < start:
                        continue
                    self._upsert(cur, tenant, tally, now)
                    if offset is not None and offset + 1 > advanced.get((topic, partition), start):
                        advanced[(topic, partition)] = offset + 1
            self._tracking.record(cur, advanced)

    def rows(
        self,
        *,
        tenant: str | None = None,
        run_id: str | None = None,
        since_ms: int | None = None,
        limit: int = 1000,
    ) -> list[DropRow]:
        """The drops asked for, the last seen first."""
        where, params = _filters(tenant, run_id, since_ms)
        statement = (
            f"SELECT {_COLUMNS} FROM otlp_drops{where} "
            "ORDER BY last_seen_ms DESC, tenant_id, run_id, reason LIMIT ?"
        )
        found = self._db.query(self._sql(statement), [*params, max(1, limit)])
        return [
            DropRow(str(t), str(r), str(why), int(n), str(s), int(first), int(last))
            for t, r, why, n, s, first, last in found
        ]

    def close(self) -> None:
        self._db.close()


def _filters(tenant: str | None, run_id: str | None, since_ms: int | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for clause, value in (
        ("tenant_id = ?", tenant),
        ("run_id = ?", run_id),
        ("last_seen_ms >= ?", since_ms),
    ):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def open_url(url: str) -> SqlDropStore:
    """The store at ``sqlite:///abs/path.db`` (``sqlite:///:memory:`` for one process) or
    ``postgresql://…``, which several receivers and mappers share."""
    return SqlDropStore(
        open_database(url, what="OTLP drops store", components=(TRACKING, MIGRATIONS))
    )


def rows_json(rows: Iterable[DropRow]) -> list[dict[str, Any]]:
    return [row.as_json() for row in rows]
