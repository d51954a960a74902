"""Projection snapshots: a cache of a run's state, trusted only if written by this projector.

A snapshot holds the state, the last applied sequence and :data:`PROJECTOR_VERSION`. Seed 002:
"Snapshots are caches … verify them before use". :func:`from_snapshot` refuses one from another
projector version (or whose sequence disagrees with its state); the caller rebuilds from events.
"""

from __future__ import annotations

from runtrail.projection.errors import SnapshotMismatch
from runtrail.projection.model import Frozen, RunProjection, SeqNo
from runtrail.projection.projector import PROJECTOR_VERSION


class ProjectionSnapshot(Frozen):
    """A run's projection as of ``last_applied_sequence``, stamped with the projector version."""

    projector_version: int
    last_applied_sequence: SeqNo
    state: RunProjection

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ProjectionSnapshot:
        return cls.model_validate_json(text)


def take_snapshot(state: RunProjection) -> ProjectionSnapshot:
    """A snapshot of ``state`` by the running projector."""
    return ProjectionSnapshot(
        projector_version=PROJECTOR_VERSION, last_applied_sequence=state.version, state=state
    )


def from_snapshot(snapshot: ProjectionSnapshot) -> RunProjection:
    """The snapshot's state, or :class:`SnapshotMismatch` if it cannot be trusted."""
    if snapshot.projector_version != PROJECTOR_VERSION:
        raise SnapshotMismatch(
            f"snapshot of {snapshot.state.tenant_id}/{snapshot.state.run_id} was written by "
            f"projector v{snapshot.projector_version}, this is v{PROJECTOR_VERSION}: "
            "rebuild from events"
        )
    if snapshot.last_applied_sequence != snapshot.state.version:
        raise SnapshotMismatch(
            f"snapshot says sequence {snapshot.last_applied_sequence} but its state is at "
            f"{snapshot.state.version}"
        )
    return snapshot.state
