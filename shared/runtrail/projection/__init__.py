"""The event-sourced run projection (seed 002): a pure projector, replay, snapshots, stores.

``apply_event`` folds one event into a :class:`RunProjection`; ``replay`` folds many, from zero
or from a trusted snapshot. Stores keep projections and consumer offsets in one transaction;
``compare_projections`` checks a shadow rebuild against the live store.

Each name below is imported from its module on first use (:mod:`runtrail.lazy_exports`): a
reader of one part (the run model, the errors) does not load the stores, the projector and the
event model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.projection.compare import ProjectionDifference, compare_projections
    from runtrail.projection.errors import (
        InvalidEventData,
        InvalidTransition,
        MissingEvents,
        ProjectionError,
        SnapshotMismatch,
        UnknownEventVersion,
    )
    from runtrail.projection.model import (
        ACTIVE,
        LIVE,
        TERMINAL,
        WAITING,
        BudgetLine,
        ModelNode,
        PendingInput,
        ProposedPlan,
        RunProjection,
        RunStatus,
        SequenceGap,
        TokenTotals,
        ToolIntent,
        ToolOutcome,
    )
    from runtrail.projection.projector import PROJECTOR_VERSION, RULES, apply_event, rule_for
    from runtrail.projection.replaying import RunsReplay, replay, replay_runs
    from runtrail.projection.snapshot import ProjectionSnapshot, from_snapshot, take_snapshot
    from runtrail.projection.store import (
        EventCoordinates,
        Halt,
        ProjectionBatch,
        ProjectionStore,
        StoreConflict,
        StoredProjection,
    )

__getattr__ = lazy_exports(
    __name__,
    {
        ".compare": ("ProjectionDifference", "compare_projections"),
        ".errors": (
            "InvalidEventData",
            "InvalidTransition",
            "MissingEvents",
            "ProjectionError",
            "SnapshotMismatch",
            "UnknownEventVersion",
        ),
        ".model": (
            "ACTIVE",
            "LIVE",
            "TERMINAL",
            "WAITING",
            "BudgetLine",
            "ModelNode",
            "PendingInput",
            "ProposedPlan",
            "RunProjection",
            "RunStatus",
            "SequenceGap",
            "TokenTotals",
            "ToolIntent",
            "ToolOutcome",
        ),
        ".projector": ("PROJECTOR_VERSION", "RULES", "apply_event", "rule_for"),
        ".replaying": ("RunsReplay", "replay", "replay_runs"),
        ".snapshot": ("ProjectionSnapshot", "from_snapshot", "take_snapshot"),
        ".store": (
            "EventCoordinates",
            "Halt",
            "ProjectionBatch",
            "ProjectionStore",
            "StoreConflict",
            "StoredProjection",
        ),
    },
)

__all__ = [
    "ACTIVE",
    "LIVE",
    "PROJECTOR_VERSION",
    "RULES",
    "TERMINAL",
    "WAITING",
    "BudgetLine",
    "EventCoordinates",
    "Halt",
    "InvalidEventData",
    "InvalidTransition",
    "MissingEvents",
    "ModelNode",
    "PendingInput",
    "ProjectionBatch",
    "ProjectionDifference",
    "ProjectionError",
    "ProjectionSnapshot",
    "ProjectionStore",
    "ProposedPlan",
    "RunProjection",
    "RunStatus",
    "RunsReplay",
    "SequenceGap",
    "SnapshotMismatch",
    "StoreConflict",
    "StoredProjection",
    "TokenTotals",
    "ToolIntent",
    "ToolOutcome",
    "UnknownEventVersion",
    "apply_event",
    "compare_projections",
    "from_snapshot",
    "replay",
    "replay_runs",
    "rule_for",
    "take_snapshot",
]
