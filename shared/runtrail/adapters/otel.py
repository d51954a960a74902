"""OpenTelemetry GenAI → runtrail: a ``SpanExporter`` for in-process use, and the publishing
step the OTLP/HTTP receiver (``runtrail run otlp-ingest``) shares with it.

Add the exporter to the agent's tracer provider behind a ``BatchSpanProcessor``::

    provider.add_span_processor(BatchSpanProcessor(RuntrailSpanExporter(publisher)))

Every ended span goes through :class:`~runtrail.adapters.otel_mapping.TraceMapper` (the mapping
is documented there and in docs/ADAPTERS.md) and the resulting events through the agent's
:class:`~runtrail.publisher.Publisher`, which redacts, spools when the broker is down and counts
what it rejects. The exporter never raises into the SDK and never waits for the broker
(publishing only enqueues): what it cannot publish is counted in :attr:`RuntrailSpanExporter.stats`
and logged, and ``export`` still answers SUCCESS (a retry by the SDK would not help).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from runtrail.adapters.otel_mapping import Mapped, TraceMapper
from runtrail.adapters.otel_spans import SpanEvent, SpanView
from runtrail.events import CURRENT_VERSIONS

log = logging.getLogger(__name__)


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

    def add(self, other: PublishOutcome) -> None:
        self.published += other.published
        self.dropped.update(other.dropped)
        self.rejected.update(other.rejected)
        self.rejected_spans += other.rejected_spans
        self.late += other.late
        self.incomplete.update(other.incomplete)


def publish_mapped(publisher: Submitter, mapped: Mapped, *, tenant: str | None) -> PublishOutcome:
    """Publish the events of one mapped batch in order; count what the publisher refused."""
    outcome = PublishOutcome(
        dropped=Counter(mapped.dropped), late=mapped.late, incomplete=Counter(mapped.incomplete)
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


def span_view(span: ReadableSpan) -> SpanView | None:
    """The mapping's view of an SDK span (None for a span without a valid context)."""
    context = span.context
    if context is None or not context.is_valid:
        return None
    parent = span.parent
    status = span.status
    return SpanView(
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_span_id=f"{parent.span_id:016x}" if parent is not None else None,
        name=span.name,
        start_ns=span.start_time or 0,
        end_ns=span.end_time or span.start_time or 0,
        # the SDK's attributes are frozen once the span ended: no copy (copying takes a lock
        # per key)
        attributes=span.attributes or {},
        events=tuple(SpanEvent(e.name, e.attributes or {}) for e in span.events),
        error=status.status_code is StatusCode.ERROR,
        status_message=status.description,
        parent_remote=bool(parent is not None and parent.is_remote),
        resource=span.resource.attributes,
    )


class RuntrailSpanExporter(SpanExporter):
    """See the module docstring. ``tenant``: the tenant of the events (else the publisher's);
    ``session_resource_attribute``: the resource attribute naming a run's session when its
    spans do not (:mod:`runtrail.adapters.otel_grouping`)."""

    def __init__(
        self,
        publisher: Submitter,
        *,
        tenant: str | None = None,
        max_traces: int = 10_000,
        flush_timeout_s: float = 10.0,
        session_resource_attribute: str | None = None,
    ) -> None:
        self.publisher = publisher
        self.tenant = tenant
        self.flush_timeout_s = flush_timeout_s
        self._mapper = TraceMapper(
            max_traces=max_traces, session_resource_attribute=session_resource_attribute
        )
        self._lock = threading.Lock()
        #: everything so far: published events, dropped spans, refused events
        self.stats = PublishOutcome()
        #: export calls that failed inside (logged; the SDK saw SUCCESS)
        self.failures = 0
        self._shutdown = False
        self._told: set[str] = set()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            views = _views(spans)
            with self._lock:
                if self._shutdown:
                    self.stats.dropped["shutdown"] += len(views)
                    return SpanExportResult.FAILURE
                mapped = self._mapper.map(views)
                outcome = publish_mapped(self.publisher, mapped, tenant=self.tenant)
                self.stats.add(outcome)
            new_reasons = set(outcome.dropped) - self._told
            if new_reasons:  # once per reason: the counts stay in stats.dropped
                self._told |= new_reasons
                log.info(
                    "runtrail: spans not recorded (%s); counted in stats.dropped",
                    ", ".join(sorted(new_reasons)),
                )
            new_gaps = set(outcome.incomplete) - self._told
            if new_gaps:  # once per reason: the counts stay in stats.incomplete
                self._told |= new_gaps
                log.info(
                    "runtrail: spans recorded incomplete (%s); counted in stats.incomplete",
                    ", ".join(sorted(new_gaps)),
                )
            if outcome.rejected:
                log.warning(
                    "runtrail: %d span event(s) refused: %s",
                    sum(outcome.rejected.values()),
                    dict(outcome.rejected),
                )
            return SpanExportResult.SUCCESS
        except Exception:
            self.failures += 1
            level = logging.DEBUG if self.failures > 1 else logging.WARNING
            log.log(
                level,
                "runtrail span export failed; %d spans not recorded",
                len(spans),
                exc_info=True,
            )
            with self._lock:
                self.stats.dropped["export-failed"] += len(spans)
            return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait (bounded) until the published events are acknowledged or spooled."""
        try:
            return self.publisher.flush(min(timeout_millis / 1000, self.flush_timeout_s)) == 0
        except Exception:
            log.debug("runtrail flush failed", exc_info=True)
            return False

    def shutdown(self) -> None:
        """Stop taking spans; the publisher stays the agent's to close."""
        with self._lock:
            self._shutdown = True
        self.force_flush()


def _views(spans: Iterable[ReadableSpan]) -> list[SpanView]:
    out = []
    for span in spans:
        view = span_view(span)
        if view is not None:
            out.append(view)
    return out
