"""A run's timeline: its events in chain order (= per-run sequence order), grouped into steps,
with the captured node records of each step beside them.

Events come from the audit store, which seals every event of the run exactly as it was
written: as summaries (envelope fields, read by the database), so a run of 10,000 events
lists fast; an event's data is read when the operator opens it (one link by index). Node
records come from the capture sink. Nothing here interprets more than the seeds do:
marks only name what an event *is* (an approval, a budget move, a state transition, a tool
outcome that is not known).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtrail.audit.link import LinkSummary
from runtrail.capture.reader import iter_records
from runtrail.capture.record import NodeIoRecord
from runtrail.privacy.resolve import resolved_record
from runtrail_tools.ui.sources import Sources

#: Marks by event type (prefix match on the dotted domain types).
_MARKS: tuple[tuple[str, str], ...] = (
    ("run.approval_", "approval"),
    ("budget.", "budget"),
    ("run.state_transitioned", "state"),
    ("run.succeeded", "state"),
    ("run.failed", "state"),
    ("run.cancellation_", "state"),
    ("run.accepted", "state"),
    ("tool.invocation_uncertain", "outcome unknown"),
    ("run.input_", "input"),
    ("MODEL_RETRY", "retry"),
    ("session.snapshot", "snapshot"),
)


def marks_of(event_type: str) -> list[str]:
    return [mark for prefix, mark in _MARKS if event_type.startswith(prefix)]


@dataclass(frozen=True, slots=True)
class EventView:
    """One sealed event as the timeline lists it (its data is fetched on demand)."""

    index: int
    sequence: int | None
    event_type: str
    event_id: str
    occurred_at: str
    recorded_at: str
    marks: list[str]

    @classmethod
    def of(cls, link: LinkSummary) -> EventView:
        event_type = link.event_type or "?"
        return cls(
            index=link.index,
            sequence=link.sequence,
            event_type=event_type,
            event_id=link.event_id or "",
            occurred_at=link.occurred_at or "",
            recorded_at=link.recorded_at or "",
            marks=marks_of(event_type),
        )


@dataclass
class Step:
    """Consecutive events of one (turnId, step), or of the run itself (no step)."""

    turn_id: str | None
    step: int | None
    events: list[EventView] = field(default_factory=list)
    nodes: list[NodeIoRecord] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.step is None:
            return "run"
        return f"step {self.step}" + (f" · turn {self.turn_id}" if self.turn_id else "")


@dataclass(frozen=True)
class Timeline:
    steps: list[Step]
    events: int
    nodes: list[NodeIoRecord]
    #: Node records whose (turn, step) no event group has (shown apart, never dropped).
    unplaced: list[NodeIoRecord]


def group_steps(links: list[LinkSummary]) -> list[Step]:
    steps: list[Step] = []
    for link in links:
        turn, step = link.turn_id, link.step
        if not steps or (steps[-1].turn_id, steps[-1].step) != (turn, step):
            steps.append(Step(turn, step))
        steps[-1].events.append(EventView.of(link))
    return steps


def tool_outcome_unknown(record: NodeIoRecord) -> bool:
    """A tool node with no recorded result: whether it took effect is not known."""
    return record.node_type == "TOOL" and (record.outputs is None or record.incomplete)


def node_records(sources: Sources, tenant: str, run_id: str) -> list[NodeIoRecord]:
    """The run's records, protected content opened for ``tenant`` (erased: the marker)."""
    resolver = sources.resolver()
    records = [
        resolved_record(resolver, r)
        for r in iter_records(sources.capture_url(), run_id, None, tenant)
    ]
    records.sort(key=lambda r: (r.started_at_epoch_ms, r.node_type != "MODEL", r.node_id))
    return records


def build_timeline(links: list[LinkSummary], records: list[NodeIoRecord]) -> Timeline:
    steps = group_steps(links)
    by_step: dict[tuple[str | None, int | None], Step] = {}
    for group in steps:
        if group.step is not None:
            by_step.setdefault((group.turn_id, group.step), group)
    unplaced: list[NodeIoRecord] = []
    for record in records:
        target = by_step.get((record.turn_id, record.step))
        if target is None:
            unplaced.append(record)
        else:
            target.nodes.append(record)
    return Timeline(steps, len(links), records, unplaced)
