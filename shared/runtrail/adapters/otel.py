"""OpenTelemetry GenAI → runtrail: a ``SpanExporter`` for in-process use (its publishing step,
:func:`~runtrail.adapters.otel_publish.publish_mapped`, is the OTLP ingest's too).

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
from collections.abc import Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from runtrail.adapters.otel_mapping import TraceMapper
from runtrail.adapters.otel_publish import PublishOutcome, Submitter, publish_mapped
from runtrail.adapters.otel_spans import SpanEvent, SpanView
from runtrail.drops.first_seen import FirstSeen

log = logging.getLogger(__name__)


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
        self._told = FirstSeen()

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
            new_reasons = self._told.new(outcome.dropped)
            if new_reasons:
                log.info(
                    "runtrail: spans not recorded (%s); counted in stats.dropped",
                    ", ".join(new_reasons),
                )
            new_gaps = self._told.new(outcome.incomplete)
            if new_gaps:
                log.info(
                    "runtrail: spans recorded incomplete (%s); counted in stats.incomplete",
                    ", ".join(new_gaps),
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
