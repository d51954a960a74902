"""The projection store interface (adapters: ``store_sqlite``, ``store_postgres``; ``open_store``
picks one by URL).

The store keeps, per (tenant, run), the projection (status, version, state JSON) or the reason
its projection halted, plus the consumer's next offset per (topic, partition). One call,
:meth:`ProjectionStore.apply_batch`, writes projections, halts, snapshots *and* offsets in one
transaction: on partition assignment the service seeks to :meth:`stored_offsets`, so every
event lands in the store exactly once, whatever the crash point.

Writes are fenced: a projection never moves to a lower version, a halted run is never
overwritten by a projection, and an offset never moves backwards. Any such write raises
:class:`StoreConflict` and the whole batch is rolled back (a zombie consumer that lost its
partitions cannot undo the new owner's work silently).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from runtrail.events import Event
from runtrail.projection.errors import ProjectionError
from runtrail.projection.model import RunProjection
from runtrail.projection.snapshot import ProjectionSnapshot

#: (topic, partition) -> the next offset to consume (last processed + 1).
Offsets = Mapping[tuple[str, int], int]


class StoreConflict(Exception):
    """A write would regress a projection or an offset, or overwrite a halted run."""


@dataclass(frozen=True, slots=True)
class EventCoordinates:
    """Where the event that halted a run is: in its run, and (if known) in the topic."""

    sequence: int
    event_id: str
    event_type: str
    schema_version: int
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None

    @classmethod
    def of(
        cls,
        event: Event,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> EventCoordinates:
        return cls(
            sequence=event.sequence,
            event_id=event.event_id,
            event_type=event.type,
            schema_version=event.schema_version,
            topic=topic,
            partition=partition,
            offset=offset,
        )


@dataclass(frozen=True, slots=True)
class Halt:
    """A run whose projection stopped at an event it could not apply."""

    tenant_id: str
    run_id: str
    reason: str
    coordinates: EventCoordinates

    @classmethod
    def of(
        cls,
        event: Event,
        error: ProjectionError,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> Halt:
        """The halt for ``error`` at ``event``; the reason is ``"<code>: <message>"``, the same
        online and in a rebuild, so a shadow comparison does not report it as a difference."""
        return cls(
            tenant_id=event.tenant_id,
            run_id=event.run_id,
            reason=f"{error.code}: {error}",
            coordinates=EventCoordinates.of(event, topic=topic, partition=partition, offset=offset),
        )


@dataclass(frozen=True, slots=True)
class ProjectionBatch:
    """Everything one transaction writes. Applied in this order: projections, halts,
    snapshots, offsets; a run may appear as a projection and then as a halt."""

    projections: Sequence[RunProjection] = ()
    halts: Sequence[Halt] = ()
    snapshots: Sequence[ProjectionSnapshot] = ()
    offsets: Offsets = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredProjection:
    """One row: the state (None if the run halted before any event applied) and halt info."""

    tenant_id: str
    run_id: str
    status: str | None
    version: int
    projector_version: int
    state: RunProjection | None
    halted: bool = False
    halt_reason: str | None = None
    halt_coordinates: EventCoordinates | None = None


StoredList = list[StoredProjection]

#: What a runs page may be ordered by: last update, start, run ID, events (version).
SortKey = Literal["updated", "started", "run", "events"]
SORT_KEYS: tuple[SortKey, ...] = ("updated", "started", "run", "events")


@dataclass(frozen=True, slots=True)
class RunQuery:
    """One page of one tenant's runs: filters, an order, and a keyset cursor either way.

    ``text`` matches a substring (case-insensitive) of the run ID and the sessions, models and
    tools its events named; ``since``/``until`` (ISO text) keep runs active in the range (last
    update at or after ``since``, start at or before ``until``); ``has_errors`` keeps runs
    that failed, retried a model call, had a tool fail or not known, or halted; ``resumed``
    keeps runs a new process continued (run.resumed). ``after`` and
    ``before`` are the (sort value, run ID) of the last or first row of the page shown: the
    page after it or before it, in the same order."""

    tenant: str
    text: str | None = None
    status: str | None = None
    halted: bool | None = None
    has_errors: bool | None = None
    resumed: bool | None = None
    since: str | None = None
    until: str | None = None
    sort: SortKey = "updated"
    descending: bool = True
    after: tuple[str, str] | None = None
    before: tuple[str, str] | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class RunsFound:
    """A page of :meth:`ProjectionStore.search`: its rows in order, how many runs match the
    filters in all, and whether pages exist after and before it."""

    rows: StoredList
    total: int
    more_after: bool
    more_before: bool


def sort_value(row: StoredProjection, sort: SortKey) -> str:
    """The cursor value of ``row`` under ``sort`` (what ``RunQuery.after/before`` take)."""
    state = row.state
    if sort == "run":
        return row.run_id
    if sort == "events":
        return str(row.version)
    if state is None:
        return ""
    return (state.updated_at if sort == "updated" else state.started_at) or ""


class ProjectionStore(Protocol):
    """What the projector service, the CLI and the shadow rebuild need from a store."""

    def apply_batch(self, batch: ProjectionBatch) -> None:
        """Write the batch in one transaction (all or nothing); :class:`StoreConflict` if fenced."""
        ...

    def get(self, tenant_id: str, run_id: str) -> StoredProjection | None:
        """The run's row, or None if the store has never seen it."""
        ...

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
        """Rows filtered by status, tenant, halted flag and run ID, ordered by (tenant, run).

        ``after`` (with ``tenant``) is a keyset cursor: only runs whose ID sorts after it, so a
        page of a tenant with 100,000 runs costs an index range scan, not an OFFSET."""
        ...

    def search(self, query: RunQuery) -> RunsFound:
        """A page of the tenant's runs as ``query`` asks (indexed by tenant and each sort key:
        a page of 100,000 runs reads an index range, never an OFFSET)."""
        ...

    def halt(self, tenant_id: str, run_id: str, reason: str, coordinates: EventCoordinates) -> None:
        """Mark the run halted (the first halt's reason and coordinates are kept)."""
        ...

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Next offset per partition; partitions never written are absent (start per reset)."""
        ...

    def rewind_offsets(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Set next offsets per partition, back or forward: the one write the offset fence lets
        through, for an operator skipping or rewinding the projector (``runtrail offsets``)."""
        ...

    def save_snapshot(self, snapshot: ProjectionSnapshot) -> None:
        """Keep the run's latest snapshot (replacing the previous one)."""
        ...

    def load_snapshot(self, tenant_id: str, run_id: str) -> ProjectionSnapshot | None:
        """The run's snapshot; :class:`SnapshotMismatch` if another projector version wrote it."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...
