"""The prune log: what retention deleted, from which store, up to which age, and when.

Why a log apart from the stores: pruning deletes whole units by age (a capture day, a sealed
object, a snapshot, a cache entry), so afterwards nothing in the store says what was there.
Each pass that deleted something (``runtrail prune`` or a service's retention timer) appends one
row; the explorer's run page reads the rows whose cutoff is after the run started, and says
which of the run's stores were pruned of what was older, and when (rather than leaving the
reader to guess why content reads as erased). A pass over every tenant has the tenant ``""``.
Shared by all writers like the OTLP drops store: SQLite for the processes of one host,
PostgreSQL otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtrail.persistence.database import open_database
from runtrail.persistence.dialect import Database, Dialect, placeholders
from runtrail.persistence.migrations import Component, Migration

if TYPE_CHECKING:
    from runtrail.config import Settings

COMPONENT = "prune-log"
#: the tenant of a pass over every tenant
ALL_TENANTS = ""

_TABLES = (
    """CREATE TABLE IF NOT EXISTS runtrail_prunes (
        tenant_id TEXT NOT NULL,
        store TEXT NOT NULL,
        cutoff_ms BIGINT NOT NULL,
        pruned_at_ms BIGINT NOT NULL,
        deleted BIGINT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS runtrail_prunes_by_tenant ON runtrail_prunes "
    "(tenant_id, cutoff_ms)",
)
MIGRATIONS = Component(COMPONENT, (Migration(1, "the prune log", _TABLES),))


@dataclass(frozen=True, slots=True)
class PruneFact:
    """One pass of retention over one store."""

    store: str
    cutoff_ms: int
    deleted: int
    pruned_at_ms: int
    tenant_id: str = ALL_TENANTS

    def as_json(self) -> dict[str, Any]:
        return {
            "tenantId": self.tenant_id or None,
            "store": self.store,
            "cutoffMs": self.cutoff_ms,
            "deleted": self.deleted,
            "prunedAtMs": self.pruned_at_ms,
        }


class SqlPruneLog:
    """The prune log on one :mod:`runtrail.persistence` database (SQLite or PostgreSQL),
    opened with :data:`MIGRATIONS` applied (:func:`open_url`)."""

    def __init__(self, db: Database) -> None:
        self.dialect: Dialect = db.dialect
        self._db = db

    def _sql(self, statement: str) -> str:
        return placeholders(statement, self.dialect)

    def record(self, store: str, cutoff_s: float, deleted: int, tenant: str | None = None) -> None:
        """Append a pass that deleted ``deleted`` units older than ``cutoff_s``; a pass that
        deleted nothing leaves no row (a timer runs every hour)."""
        if deleted <= 0:
            return
        with self._db.transaction() as cur:
            cur.execute(
                self._sql(
                    "INSERT INTO runtrail_prunes "
                    "(tenant_id, store, cutoff_ms, pruned_at_ms, deleted) VALUES (?, ?, ?, ?, ?)"
                ),
                [tenant or ALL_TENANTS, store, int(cutoff_s * 1000), _now_ms(), deleted],
            )

    def facts(self, tenant: str, after_ms: int = 0) -> list[PruneFact]:
        """The passes that could have touched ``tenant``'s data written at ``after_ms`` or
        later (their cutoff is after it), the latest first."""
        rows = self._db.query(
            self._sql(
                "SELECT store, cutoff_ms, deleted, pruned_at_ms, tenant_id FROM runtrail_prunes "
                "WHERE tenant_id IN (?, ?) AND cutoff_ms > ? ORDER BY pruned_at_ms DESC, store"
            ),
            [tenant, ALL_TENANTS, after_ms],
        )
        return [PruneFact(str(s), int(c), int(d), int(p), str(t)) for s, c, d, p, t in rows]

    def close(self) -> None:
        self._db.close()


def record_prune(
    settings: Settings, store: str, cutoff_s: float, deleted: int, tenant: str | None = None
) -> None:
    """Append one pass to the settings' prune log (opened for it: a pass is rare)."""
    if deleted <= 0:
        return
    from runtrail.persistence.kinds import PRUNE_LOG
    from runtrail.persistence.registry import open_store

    log = open_store(PRUNE_LOG, settings.resolved_prune_log_url())
    try:
        log.record(store, cutoff_s, deleted, tenant)
    finally:
        log.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def open_url(url: str) -> SqlPruneLog:
    """The log at ``sqlite:///abs/path.db`` or ``postgresql://…``; every service and the
    command share it."""
    return SqlPruneLog(open_database(url, what="prune log", components=(MIGRATIONS,)))
