"""The resume-cache store's interface: entries, open state and consumed positions.

Adapters, one module each, named in the table of :mod:`runtrail.persistence.kinds`:
:mod:`.store_sqlite` (``sqlite:///path.db``, the embedded default) and :mod:`.store_postgres`
(``postgresql://…``, production; several service instances share it), both built on the
statements of :mod:`.store_sql`. Open one with ``open_store(RESUME_ENTRIES, url)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from runtrail.resume.builder import ModelNode, WriteBatch
from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.keys import Kind, Scope

#: An entry's primary key: tenant, run, kind (``Kind.value``), key.
StoredEntryKey = tuple[str, str, str, str]


class CacheStore(ABC):
    """What the resume-cache service, its lookups and the CLI need of a store."""

    dialect: str

    @abstractmethod
    def apply(self, batch: WriteBatch, topic: str) -> None:
        """Make one flush's changes and positions durable, atomically."""

    @abstractmethod
    def import_entries(self, entries: Iterable[CacheEntry]) -> int:
        """Insert entries (first wins); returns how many were new."""

    @abstractmethod
    def import_intents(
        self, intents: Iterable[Intent], topic: str, partition_of: Callable[[str], int]
    ) -> int:
        """Insert open intents (first wins) under their run's partition; how many were new."""

    @abstractmethod
    def offsets(self, topic: str) -> dict[int, int]:
        """Per partition, the next offset to consume (what was made durable)."""

    @abstractmethod
    def rewind_offsets(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets per partition, back or forward (the operator's explicit rewind)."""

    @abstractmethod
    def open_state(
        self, topic: str, partitions: Sequence[int]
    ) -> tuple[list[ModelNode], list[tuple[Intent, int]]]:
        """The open model nodes and intents of these partitions, to resume building."""

    @abstractmethod
    def get_entry(
        self, tenant: str, run_id: str, kind: Kind, key: str, scope: Scope = Scope.RUN
    ) -> CacheEntry | None:
        """The entry under a key, in the run (or the tenant's newest, ``Scope.TENANT``)."""

    @abstractmethod
    def get_intent(self, tenant: str, run_id: str, key: str) -> Intent | None:
        """An open intent of the run under a key."""

    @abstractmethod
    def run_state(self, tenant: str, run_id: str) -> RunState:
        """The run's last applied sequence and its open intents."""

    @abstractmethod
    def entries(self, tenant: str | None = None, run_id: str | None = None) -> list[CacheEntry]:
        """Entries of a tenant (all tenants if None) in key order, or of one of its runs (a
        primary-key range: what the run explorer shows for a run)."""

    @abstractmethod
    def entries_written_before(self, cutoff_ms: int) -> list[StoredEntryKey]:
        """The keys of the entries written before ``cutoff_ms`` (epoch ms): what retention
        prunes."""

    @abstractmethod
    def delete_entries(self, keys: Sequence[StoredEntryKey]) -> int:
        """Delete entries by key; how many there were."""

    @abstractmethod
    def intents(self, tenant: str | None = None) -> list[Intent]:
        """Every open intent (of one tenant), in key order."""

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """Counts per tenant and kind, open intents and model nodes, runs, offsets."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's connections."""
