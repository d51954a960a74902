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

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from runtrail.audit.link import LinkSummary
from runtrail.capture.reader import iter_records
from runtrail.capture.record import NodeIoRecord
from runtrail.capture.times import epoch_ms_or_none
from runtrail.privacy.resolve import resolved_record
from runtrail_tools.ui.resumes import ResumeMark
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
    ("run.resumed", "resumed"),
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
    #: ``kind:id`` of who wrote it ("" when the envelope names no one)
    actor: str = ""
    #: ``occurredAt`` in epoch ms (the writer's clock, which capture's node times use too);
    #: None when it does not parse
    at_ms: int | None = None

    @classmethod
    def of(cls, link: LinkSummary) -> EventView:
        event_type = link.event_type or "?"
        actor = ":".join(p for p in (link.actor_kind, link.actor_id) if p)
        return cls(
            index=link.index,
            sequence=link.sequence,
            event_type=event_type,
            event_id=link.event_id or "",
            occurred_at=link.occurred_at or "",
            recorded_at=link.recorded_at or "",
            marks=marks_of(event_type),
            actor=actor,
            at_ms=epoch_ms_or_none(link.occurred_at),
        )


@dataclass
class Step:
    """Consecutive events of one (turnId, step), or of the run itself (no step). Its links
    become :class:`EventView` rows only when asked (a long run renders one page of steps)."""

    turn_id: str | None
    step: int | None
    links: list[LinkSummary] = field(default_factory=list)
    nodes: list[NodeIoRecord] = field(default_factory=list)
    #: run.resumed events in this step: a new process took over here
    resumes: list[ResumeMark] = field(default_factory=list)

    @cached_property
    def events(self) -> list[EventView]:
        return [EventView.of(link) for link in self.links]

    @property
    def label(self) -> str:
        if self.step is None:
            return "run"
        return f"step {self.step}" + (f" · turn {self.turn_id}" if self.turn_id else "")

    @property
    def retries(self) -> int:
        """Failed model attempts the step retried (each MODEL_RETRY drops one attempt)."""
        return sum(1 for ev in self.events if ev.event_type == "MODEL_RETRY")

    @property
    def span_ms(self) -> tuple[int, int] | None:
        """From its first event's time to its last one's (None when no time parses)."""
        times = [ev.at_ms for ev in self.events if ev.at_ms is not None]
        return (min(times), max(times)) if times else None

    def first_token(self) -> FirstToken | None:
        """Time to first token of a streamed answer: from the step's last MODEL_REQUEST to
        the first MODEL_RESPONSE after it, when two or more responses follow it (streamed
        deltas; a single response is the whole answer, so its delay is no first token)."""
        asked: int | None = None
        first: int | None = None
        chunks = 0
        for ev in self.events:
            if ev.event_type == "MODEL_REQUEST":
                asked, first, chunks = ev.at_ms, None, 0
            elif ev.event_type == "MODEL_RESPONSE" and asked is not None:
                chunks += 1
                if first is None:
                    first = ev.at_ms
        if asked is None or first is None or chunks < 2:
            return None
        return FirstToken(max(0, first - asked), chunks)


@dataclass(frozen=True, slots=True)
class FirstToken:
    """How long a streamed answer took to start, and in how many response events it came."""

    after_ms: int
    chunks: int


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
        steps[-1].links.append(link)
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


def build_timeline(
    links: list[LinkSummary],
    records: list[NodeIoRecord],
    resumes: Mapping[int, ResumeMark] | None = None,
) -> Timeline:
    """Steps of the links, each with its node records and the resumes (by link index) that
    happened in it."""
    steps = group_steps(links)
    if resumes:
        for group in steps:
            group.resumes = [resumes[x.index] for x in group.links if x.index in resumes]
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
