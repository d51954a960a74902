"""Replay: fold recorded events through the projector; never re-executes anything.

:func:`replay` rebuilds one run, from zero or from a trusted snapshot. :func:`replay_runs`
folds an interleaved stream of many runs the way the service does: a run whose event cannot be
applied halts (its error is kept, its later events are skipped) and the other runs go on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from runtrail.events import Event
from runtrail.projection.errors import ProjectionError
from runtrail.projection.model import RunProjection
from runtrail.projection.projector import apply_event
from runtrail.projection.snapshot import ProjectionSnapshot, from_snapshot

RunKey = tuple[str, str]  # (tenant ID, run ID)


def replay(
    events: Iterable[Event], start: RunProjection | ProjectionSnapshot | None = None
) -> RunProjection:
    """The projection of one run after ``events``, starting from ``start`` (state or snapshot)."""
    state = from_snapshot(start) if isinstance(start, ProjectionSnapshot) else start
    for event in events:
        state = apply_event(state, event)
    if state is None:
        raise ValueError("nothing to replay: no events and no start state")
    return state


@dataclass
class RunsReplay:
    """Projections of every run in a stream, and the runs that halted (with why)."""

    projections: dict[RunKey, RunProjection] = field(default_factory=dict)
    halted: dict[RunKey, ProjectionError] = field(default_factory=dict)
    #: The event each halted run stopped at.
    halted_at: dict[RunKey, Event] = field(default_factory=dict)
    #: Events not applied because their run had halted earlier in the stream.
    skipped: int = 0


def replay_runs(events: Iterable[Event]) -> RunsReplay:
    """Fold a stream of many runs; a halted run stops, the others continue."""
    out = RunsReplay()
    for event in events:
        key = (event.tenant_id, event.run_id)
        if key in out.halted:
            out.skipped += 1
            continue
        try:
            out.projections[key] = apply_event(out.projections.get(key), event)
        except ProjectionError as exc:
            out.halted[key] = exc
            out.halted_at[key] = event
    return out
