"""Prometheus series of the OTLP receiver (beside the publisher's own in the same registry).

Every span that did not become events is counted with its reason, so "telemetry dropped under
load without a counter" cannot happen here: ``runtrail_otlp_ingest_spans{outcome,reason}``;
so is every log record that was not kept for its span: ``runtrail_otlp_ingest_log_records``.
Counters move once per request (per raw record in the mapper), not per span. A receiver that
forwards counts what it forwarded; the mapper (``runtrail run otlp-mapper``) registers the
same series for what mapping made of it.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge

from runtrail.adapters.otel_publish import PublishOutcome
from runtrail.drops.first_seen import FirstSeen

log = logging.getLogger(__name__)


class IngestMetrics:
    """Requests by outcome; spans by outcome and reason; events published; open traces."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "runtrail_otlp_ingest_requests",
            "POST /v1/traces and /v1/logs requests by outcome (ok, partial, unauthorized, bad_request, "
            "too_large, unsupported, unavailable, error).",
            ["outcome"],
            registry=registry,
        )
        self._spans = Counter(
            "runtrail_otlp_ingest_spans",
            "Spans received, by outcome: recorded (reason model-without-content: a model call "
            "recorded with no messages); forwarded (to the raw topic, for the mapper); dropped "
            "(published nothing), by reason (not-genai, unmapped-operation:NAME, after-run-end, "
            "late-span, duplicate-span); rejected: the events of spans the publisher refused, by "
            "its reason.",
            ["outcome", "reason"],
            registry=registry,
        )
        self._logs = Counter(
            "runtrail_otlp_ingest_log_records",
            "Log records received, by outcome: kept (joined to their span when it comes); "
            "forwarded (to the raw topic, for the mapper); dropped, by reason (log-not-genai, "
            "log-without-span, log-after-span, log-waited-too-long).",
            ["outcome", "reason"],
            registry=registry,
        )
        self.events = Counter(
            "runtrail_otlp_ingest_events",
            "Events handed to the publisher (redacted, then produced or spooled).",
            registry=registry,
        )
        self.late = Counter(
            "runtrail_otlp_ingest_late_spans",
            "Spans recorded late: mapped into a step that had already ended (a span of a trace "
            "that arrived after later-started ones; its turn and step are right).",
            registry=registry,
        )
        self.open_traces = Gauge(
            "runtrail_otlp_ingest_open_traces",
            "Traces whose root span has not ended yet (their turns and steps are kept).",
            registry=registry,
        )
        self.evicted = Counter(
            "runtrail_otlp_ingest_evicted_traces",
            "Open traces forgotten to stay under max_traces (a later span re-opens the run).",
            registry=registry,
        )
        for outcome in ("ok", "partial", "unauthorized", "bad_request", "too_large"):
            self._requests.labels(outcome)
        self._spans.labels("recorded", "")
        self._spans.labels("dropped", "not-genai")
        self._logs.labels("kept", "")
        #: the reasons already logged: each is logged once, its counts are in the metrics
        self._told = FirstSeen()

    def request(self, outcome: str) -> None:
        self._requests.labels(outcome).inc()

    def spans(self, outcome: str, counts: Tally[str]) -> None:
        for reason, n in counts.items():
            if n:
                self._spans.labels(outcome, reason).inc(n)

    def logs(self, outcome: str, counts: Tally[str]) -> None:
        for reason, n in counts.items():
            if n:
                self._logs.labels(outcome, reason).inc(n)

    def logs_taken(self, outcome: str, taken: int, refused: Tally[str]) -> None:
        """A request's ``taken`` log records: those not ``refused`` counted under ``outcome``
        (kept, forwarded), the refused ones as dropped by reason (each new reason told once)."""
        self.logs(outcome, Tally({"": taken - sum(refused.values())}))
        self.logs("dropped", refused)
        self.tell("log records not recorded (runtrail_otlp_ingest_log_records_total)", refused)

    def mapped(self, spans: int, outcome: PublishOutcome) -> None:
        """What ``spans`` spans became: events published, late, recorded, dropped, rejected."""
        dropped = sum(outcome.dropped.values())
        # a tool span that waited for its parent is dropped (late-span) in a later request
        recorded = max(0, spans - dropped - outcome.rejected_spans)
        self.events.inc(outcome.published)
        self.late.inc(outcome.late)
        gaps = sum(outcome.incomplete.values())
        self.spans("recorded", Tally({"": recorded - gaps}) + outcome.incomplete)
        self.spans("dropped", outcome.dropped)
        self.spans("rejected", outcome.rejected)
        self.tell("spans not recorded (runtrail_otlp_ingest_spans_total)", outcome.dropped)
        self.tell(
            "spans recorded incomplete (runtrail_otlp_ingest_spans_total)", outcome.incomplete
        )

    def tell(self, what: str, counts: Tally[str]) -> None:
        """Log each new reason once (INFO), naming the metric that counts it from then on."""
        new = self._told.new(reason for reason in counts if counts[reason])
        if new:
            log.info("otlp-ingest: %s, first seen: %s (counted from now on)", what, ", ".join(new))
