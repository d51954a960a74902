"""A run's waterfall: each step and each node as a bar on one time axis, with its duration.

Steps span from their first event to their last (``occurredAt``, the writer's clock); nodes
span what capture recorded (``startedAt`` + ``durationMs``, read from the same events'
``occurredAt``), so both sit on one clock. A streamed model answer shows its time to first
token (:meth:`Step.first_token`) on its MODEL node's bar. Bars are positioned in per-mille of
the run's span, so the page draws them with SVG attributes (no inline style: the CSP forbids
it).
"""

from __future__ import annotations

from dataclasses import dataclass

from runtrail.capture.record import NodeIoRecord
from runtrail_tools.ui.timeline import FirstToken, Step, Timeline


@dataclass(frozen=True, slots=True)
class Bar:
    kind: str  # "step", "model" or "tool"
    label: str
    start_ms: int
    duration_ms: int
    step: int | None
    record_id: str | None = None
    first_token: FirstToken | None = None
    retries: int = 0


@dataclass(frozen=True, slots=True)
class Waterfall:
    start_ms: int
    span_ms: int
    bars: list[Bar]

    def offset(self, at_ms: int) -> int:
        """Per mille of the span from the run's start to ``at_ms``."""
        return round(1000 * (at_ms - self.start_ms) / self.span_ms) if self.span_ms else 0

    def width(self, duration_ms: int) -> int:
        """Per mille of the span a duration takes (at least 2, so an instant still shows)."""
        return max(2, round(1000 * duration_ms / self.span_ms)) if self.span_ms else 2


def _node_label(record: NodeIoRecord) -> str:
    if record.node_type == "MODEL":
        return f"model {record.model_id or ''}".strip()
    inputs = record.inputs if isinstance(record.inputs, dict) else {}
    return f"tool {inputs.get('toolName') or record.node_id.rsplit('|', 1)[-1]}"


def _node_bar(record: NodeIoRecord, step: Step | None) -> Bar:
    first = step.first_token() if step is not None and record.node_type == "MODEL" else None
    return Bar(
        record.node_type.lower(),
        _node_label(record),
        record.started_at_epoch_ms,
        record.duration_ms,
        record.step,
        record.record_id,
        first,
    )


def build_waterfall(timeline: Timeline) -> Waterfall | None:
    """Bars in timeline order (each step, then its nodes by start); None when nothing has a
    time."""
    bars: list[Bar] = []
    for step in timeline.steps:
        span = step.span_ms
        if step.step is not None and span is not None:
            bars.append(
                Bar(
                    "step",
                    step.label,
                    span[0],
                    span[1] - span[0],
                    step.step,
                    retries=step.retries,
                )
            )
        for record in sorted(step.nodes, key=lambda r: r.started_at_epoch_ms):
            bars.append(_node_bar(record, step))
    bars += [_node_bar(record, None) for record in timeline.unplaced]
    starts = [b.start_ms for b in bars]
    ends = [b.start_ms + b.duration_ms for b in bars]
    for step in timeline.steps:  # events outside any step (run.accepted, run.succeeded)
        span = step.span_ms
        if span is not None:
            starts.append(span[0])
            ends.append(span[1])
    if not bars or not starts:
        return None
    start = min(starts)
    return Waterfall(start, max(ends) - start, bars)
