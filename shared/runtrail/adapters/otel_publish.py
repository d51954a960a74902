"""Mapped spans → published events: the one publishing step of every OTel path.

The in-process exporter (:mod:`runtrail.adapters.otel`), the OTLP receiver mapping in its own
process and the scaled-out mapper (``runtrail run otlp-mapper``) all publish what
:class:`~runtrail.adapters.otel_mapping.TraceMapper` made through :func:`publish_mapped`. The
first two let the publisher number each run; the mapper passes a ``numbering``: each event's
eventId and sequence decided from its tenant, trace and span, so that mapping the same spans
again (a replay after a crash or a rebalance) writes the same events, which consumers skip as
duplicates, never a conflict. Pure: no OpenTelemetry import (the mapper runs without the SDK).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtrail.adapters.otel_mapping import Mapped, Out
from runtrail.drops.tally import DropTally
from runtrail.events import CURRENT_VERSIONS

#: an event's (eventId, sequence), decided by the caller (None: the publisher numbers it)
Numbering = Callable[[Out], tuple[str, int]]


class Submitter(Protocol):
    """The part of :class:`runtrail.publisher.Publisher` used here."""

    def submit(self, event: Any, *, trace_context: Any = ...) -> Any: ...

    def flush(self, timeout: float = ...) -> int: ...

    def forget_run(self, run_id: str) -> None: ...


#: events after which a run publishes nothing more (its sequence counter can go)
TERMINAL = frozenset({"run.succeeded", "run.failed"})


@dataclass
class PublishOutcome:
    """What one batch of spans became."""

    published: int = 0
    #: spans that published nothing (mapping), by reason
    dropped: Counter[str] = field(default_factory=Counter)
    #: events the publisher refused, by its reason (each also in its metrics and log)
    rejected: Counter[str] = field(default_factory=Counter)
    #: spans with at least one refused event
    rejected_spans: int = 0
    #: spans mapped late: into a step that had already ended (turn and step still right)
    late: int = 0
    #: spans recorded without something they should carry, by reason (``Mapped.incomplete``)
    incomplete: Counter[str] = field(default_factory=Counter)
    #: ``dropped`` and ``incomplete`` by trace (= run): this batch's only (:meth:`add` leaves
    #: it, so a long-lived total keeps no entry per trace)
    tally: DropTally = field(default_factory=DropTally)

    def add(self, other: PublishOutcome) -> None:
        self.published += other.published
        self.dropped.update(other.dropped)
        self.rejected.update(other.rejected)
        self.rejected_spans += other.rejected_spans
        self.late += other.late
        self.incomplete.update(other.incomplete)


def publish_mapped(
    publisher: Submitter,
    mapped: Mapped,
    *,
    tenant: str | None,
    numbering: Numbering | None = None,
) -> PublishOutcome:
    """Publish the events of one mapped batch in order; count what the publisher refused.
    ``numbering``: each event's eventId and sequence (else the publisher's own)."""
    outcome = PublishOutcome(
        dropped=Counter(mapped.dropped),
        late=mapped.late,
        incomplete=Counter(mapped.incomplete),
        tally=mapped.tally,
    )
    refused_spans: set[str] = set()
    for event in mapped.events:
        form: dict[str, Any] = {
            "type": event.event_type,
            "schemaVersion": CURRENT_VERSIONS[event.event_type],
            "runId": event.run_id,
            "occurredAt": event.occurred_at,
            "sessionId": event.session_id,
            "turnId": event.turn_id,
            "step": event.step,
            "data": event.data,
        }
        if tenant is not None:
            form["tenantId"] = tenant
        if numbering is not None:
            event_id, sequence = numbering(event)
            form["eventId"], form["sequence"] = event_id, str(sequence)
        context = {"traceparent": f"00-{event.run_id}-{event.span_id}-01"}
        submitted = publisher.submit(form, trace_context=context)
        if submitted.event_id is not None:
            outcome.published += 1
        else:
            outcome.rejected[str(submitted.reason)] += 1
            refused_spans.add(event.span_id)
        if event.event_type in TERMINAL:
            publisher.forget_run(event.run_id)  # a long-lived process keeps no counter per run
    outcome.rejected_spans = len(refused_spans)
    return outcome
