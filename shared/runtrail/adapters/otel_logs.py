"""GenAI content sent as OpenTelemetry log records, joined to the spans it belongs to.

Why: instrumentations in their default mode (``opentelemetry-instrumentation-openai-v2`` with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, among others) put the prompt and
the answer not on the span but in log records (``gen_ai.user.message``, ``gen_ai.choice``, …,
or ``gen_ai.client.inference.operation.details``) that carry the span's trace and span ID. A
model node recorded from the span alone has no messages. So a log record waits here, by its
span, and joins the span as a span event when the span arrives: the mapping then reads it as
it reads span events (:mod:`runtrail.adapters.otel_mapping`).

The OTel SDK exports logs and spans on separate schedules (by default every 1 s and every
5 s), so a span's log records arrive before the span. One that arrives after its span was
recorded, one without a span context, one that is not a GenAI event, and one still waiting
when the bound is reached are each counted by reason, never joined to the wrong span.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from runtrail.adapters.otel_spans import SpanEvent, SpanView
from runtrail.drops.tally import DropTally

#: log records forgotten while waiting for a span that did not come in time
WAITED_TOO_LONG = "log-waited-too-long"

#: the log-record event names the mapping reads (as span events of the same name)
GENAI_EVENTS = frozenset(
    {
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.client.inference.operation.details",
    }
)


@dataclass(frozen=True)
class LogView:
    """What the join reads of a log record, from OTLP or the SDK alike."""

    trace_id: str
    span_id: str
    #: ``event_name`` of the record (or its ``event.name`` attribute)
    event_name: str
    attributes: Mapping[str, Any]
    #: the record's body: a map is read as attributes of the event, anything else as ``body``
    body: Any = None

    def as_span_event(self) -> SpanEvent:
        attributes = dict(self.attributes)
        attributes.pop("event.name", None)
        if isinstance(self.body, Mapping):
            for key, value in self.body.items():
                attributes.setdefault(key, value)
        elif self.body is not None:
            attributes.setdefault("body", self.body)
        return SpanEvent(self.event_name, attributes)


def event_name(record_event_name: str, attributes: Mapping[str, Any]) -> str:
    """The record's event name: its own field, else the ``event.name`` attribute older
    instrumentations set."""
    if record_event_name:
        return record_event_name
    named = attributes.get("event.name")
    return named if isinstance(named, str) else ""


def refusal(record: LogView) -> str | None:
    """Why a log record can never join a span, whatever came before it (no span context, not
    a GenAI event); None when it can. What a receiver that forwards records can tell alone."""
    if not record.trace_id or not record.span_id:
        return "log-without-span"
    if record.event_name not in GENAI_EVENTS:
        return "log-not-genai"
    return None


class LogJoin:
    """Log records waiting for their span, bounded; spans recently recorded, to tell a late
    record from one whose span has not come yet."""

    def __init__(self, *, max_waiting: int = 10_000, max_recorded: int = 100_000) -> None:
        self.max_waiting = max(1, max_waiting)
        self.max_recorded = max(1, max_recorded)
        self._waiting: OrderedDict[tuple[str, str], list[SpanEvent]] = OrderedDict()
        self._recorded: OrderedDict[tuple[str, str], None] = OrderedDict()
        #: log records forgotten to stay under ``max_waiting`` before their span came
        self.evicted = 0
        #: per trace, how many of its spans have records waiting
        self._spans_waiting: Counter[str] = Counter()

    def add(self, logs: Iterable[LogView], tally: DropTally | None = None) -> Counter[str]:
        """Keep each GenAI log record until its span comes; the others, and those forgotten
        now to stay under ``max_waiting`` (``log-waited-too-long``: added by this call or an
        earlier one), counted by reason (also in ``tally``, by trace)."""
        refused: Counter[str] = Counter()
        for record in logs:
            reason = refusal(record)
            if reason is None and (record.trace_id, record.span_id) in self._recorded:
                reason = "log-after-span"
            if reason is not None:
                refused[reason] += 1
                if tally is not None:
                    tally.add(record.trace_id, reason, record.event_name or "(no event name)")
            else:
                key = (record.trace_id, record.span_id)
                if key not in self._waiting:
                    self._spans_waiting[record.trace_id] += 1
                self._waiting.setdefault(key, []).append(record.as_span_event())
                self._waiting.move_to_end(key)
        while len(self._waiting) > self.max_waiting:
            (trace_id, _), events = self._waiting.popitem(last=False)
            self._gone(trace_id)
            self.evicted += len(events)
            refused[WAITED_TOO_LONG] += len(events)
            if tally is not None:
                tally.add(trace_id, WAITED_TOO_LONG, events[0].name, len(events))
        return refused

    def attach(self, spans: Iterable[SpanView]) -> list[SpanView]:
        """``spans``, each with the log records that waited for it as span events."""
        out = []
        for span in spans:
            key = (span.trace_id, span.span_id)
            self._recorded[key] = None
            events = self._waiting.pop(key, None)
            if events is not None:
                self._gone(span.trace_id)
            out.append(span if events is None else replace(span, events=(*span.events, *events)))
        while len(self._recorded) > self.max_recorded:
            self._recorded.popitem(last=False)
        return out

    def drop_trace(self, trace_id: str, tally: DropTally | None = None) -> int:
        """Forget the records still waiting for spans of ``trace_id`` (its spans are not coming:
        the trace went idle); how many (also in ``tally`` as ``log-waited-too-long``)."""
        if not self._spans_waiting[trace_id]:
            return 0
        keys = [key for key in self._waiting if key[0] == trace_id]
        del self._spans_waiting[trace_id]
        dropped = [event for key in keys for event in self._waiting.pop(key)]
        if tally is not None and dropped:
            tally.add(trace_id, WAITED_TOO_LONG, dropped[0].name, len(dropped))
        return len(dropped)

    def waits_for(self, trace_id: str) -> bool:
        """Whether records of ``trace_id`` wait for their spans."""
        return self._spans_waiting[trace_id] > 0

    def _gone(self, trace_id: str) -> None:
        """One span of ``trace_id`` has no records waiting any more."""
        left = self._spans_waiting[trace_id] - 1
        if left > 0:
            self._spans_waiting[trace_id] = left
        else:
            del self._spans_waiting[trace_id]

    @property
    def waiting(self) -> int:
        """Log records waiting for their span."""
        return sum(len(events) for events in self._waiting.values())
