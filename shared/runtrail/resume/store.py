"""The resume-cache store's interface: entries, open state and consumed positions.

Adapters, one module each, named in the table of :mod:`runtrail.persistence.kinds`:
:mod:`.store_sqlite` (``sqlite:///path.db``, the embedded default) and :mod:`.store_postgres`
(``postgresql://…``, production; several service instances share it), both built on the
statements of :mod:`.store_sql`. Open one with ``open_store(RESUME_ENTRIES, url)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtrail.resume.builder import ModelNode, WriteBatch
from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.keys import Kind, Scope

#: An entry's primary key: tenant, run, kind (``Kind.value``), key.
StoredEntryKey = tuple[str, str, str, str]
#: An open intent's primary key: tenant, run, intent ID.
StoredIntentKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class CacheErasure:
    """What an erasure covers in a cache store: the tenant's entries, open intents and open
    model nodes of the erased runs, and those whose stored form holds ``marker`` (the text
    every reference sealed by the destroyed data key holds: a data subject's erasure spans
    runs nobody names)."""

    tenant: str
    runs: tuple[str, ...] = ()
    marker: str | None = None

    def __bool__(self) -> bool:
        return bool(self.runs or self.marker)

    def holds(self, tenant: str, run_id: str, stored: bytes) -> bool:
        """Whether a record of ``tenant``'s ``run_id``, stored as ``stored``, is covered."""
        return tenant == self.tenant and (
            run_id in self.runs or (self.marker is not None and self.marker.encode() in stored)
        )


@dataclass(slots=True)
class ErasedRows:
    """The keys of what an erasure deleted (or would delete) from a cache store."""

    entries: list[StoredEntryKey] = field(default_factory=list)
    intents: list[StoredIntentKey] = field(default_factory=list)
    models: int = 0

    @property
    def count(self) -> int:
        return len(self.entries) + len(self.intents) + self.models


class CacheStore(ABC):
    """What the resume-cache service, its lookups and the CLI need of a store."""

    dialect: str

    @abstractmethod
    def apply(self, batch: WriteBatch, topic: str, erasures: Sequence[CacheErasure] = ()) -> None:
        """Make one flush's changes and positions durable, atomically; ``erasures`` (recorded
        in the events the batch consumed) delete what they cover first, in the same
        transaction, so an erasure is applied exactly once with the positions past it."""

    @abstractmethod
    def holding(self, erasure: CacheErasure) -> ErasedRows:
        """The keys of the entries and open intents ``erasure`` covers (and how many open
        model nodes)."""

    @abstractmethod
    def erase(self, erasure: CacheErasure) -> ErasedRows:
        """Delete what ``erasure`` covers (entries, open intents, open model nodes; a run's
        last sequence stays: it holds no content); what was deleted."""

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
