"""Prometheus series of the sessions service (beside the runtime's ``runtrail_*``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from runtrail.runtime.metrics import ServiceSeries

SIZE_BUCKETS = (1e3, 1e4, 1e5, 2.5e5, 1e6, 4e6, 1.6e7, 6.4e7)


class SessionsMetrics:
    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        series = ServiceSeries(service, registry)
        self.saves = series.by(
            Counter,
            "runtrail_sessions_saves_total",
            "Session snapshots saved, by what triggered them",
            "trigger",
        )
        self.save_conflicts = series.own(
            Counter,
            "runtrail_sessions_save_conflicts_total",
            "Saves that found another writer's snapshot and merged it before retrying",
        )
        self.save_seconds = series.own(
            Histogram,
            "runtrail_sessions_save_seconds",
            "Time to snapshot and durably save one session (saves overlapped in one batch share its time)",
        )
        self.snapshot_bytes = series.own(
            Histogram,
            "runtrail_sessions_snapshot_bytes",
            "Size of saved snapshots",
            buckets=SIZE_BUCKETS,
        )
        self.pointers = series.by(
            Counter,
            "runtrail_sessions_pointers_total",
            "Latest-snapshot messages sent to the sessions topic, inline or by reference",
            "kind",
        )
        self.tracked = series.own(Gauge, "runtrail_sessions_tracked", "Sessions held in memory")
        self.halted = series.own(
            Gauge,
            "runtrail_sessions_halted",
            "Sessions whose stored snapshot is corrupted or untrusted (not saved; their "
            "offsets are held until the snapshot is repaired)",
        )
        self.http_requests = series.by(
            Counter,
            "runtrail_sessions_http_requests_total",
            "Session API requests by status",
            "status",
        )

    def saved(self, trigger: str, size: int) -> None:
        self.saves.labels(self.service, trigger).inc()
        self.snapshot_bytes.observe(size)
