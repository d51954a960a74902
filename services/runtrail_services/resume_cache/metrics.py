"""Prometheus series of the resume-cache service (beside the runtime's ``runtrail_*``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from runtrail.runtime.metrics import ServiceSeries


class ResumeCacheMetrics:
    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        series = ServiceSeries(service, registry)
        self.entries = series.by(
            Counter,
            "runtrail_resume_cache_entries_total",
            "Cache entries built from the event stream",
            "kind",
        )
        self.intents = series.by(
            Counter,
            "runtrail_resume_cache_intents_total",
            "Tool intents opened and closed",
            "change",
        )
        self.lookups = series.by(
            Counter,
            "runtrail_resume_cache_lookups_total",
            "HTTP lookups by outcome (hit, miss, not_caught_up, unauthorized, bad_request)",
            "outcome",
        )
        self.lookup_seconds = series.by(
            Histogram,
            "runtrail_resume_cache_lookup_seconds",
            "Lookup latency, read-your-writes waits included",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
        )
        self.topic_records = series.by(
            Counter,
            "runtrail_resume_cache_topic_records_total",
            "Records written to the compacted cache topic",
        )
        self.service = service

    def lookup(self, outcome: str) -> None:
        self.lookups.labels(self.service, outcome).inc()
