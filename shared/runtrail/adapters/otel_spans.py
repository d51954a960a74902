"""What the mapping reads of a span: one view, built from the OTel SDK or from OTLP alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SpanEvent:
    name: str
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class SpanView:
    """What the mapping reads of a span, from the SDK or from OTLP alike."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    events: Sequence[SpanEvent] = ()
    error: bool = False
    status_message: str | None = None
    #: the parent is in another process: this span is the local root
    parent_remote: bool = False
    #: the attributes of the resource that produced the span (``service.name``, …)
    resource: Mapping[str, Any] = field(default_factory=dict)
    #: attributes a convention translated into the values they mean: read as they are, never as
    #: JSON text (a tool's text result that looks like JSON stays text)
    verbatim: frozenset[str] = frozenset()
    #: its ``gen_ai.operation.name`` holds only when the span is a local root or the span model
    #: or tool spans hang under (a turn); otherwise it is not GenAI (a convention's generic
    #: "chain" span, known to be an agent only by where it sits in the trace)
    turn_only: bool = False

    @property
    def local_root(self) -> bool:
        return not self.parent_span_id or self.parent_remote
