"""Prometheus series of the sessions service (beside the runtime's ``runtrail_*``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

SIZE_BUCKETS = (1e3, 1e4, 1e5, 2.5e5, 1e6, 4e6, 1.6e7, 6.4e7)


class SessionsMetrics:
    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        self.saves = Counter(
            "runtrail_sessions_saves_total",
            "Session snapshots saved, by what triggered them",
            ["service", "trigger"],
            registry=registry,
        )
        self.save_conflicts = Counter(
            "runtrail_sessions_save_conflicts_total",
            "Saves that found another writer's snapshot and merged it before retrying",
            ["service"],
            registry=registry,
        ).labels(service)
        self.save_seconds = Histogram(
            "runtrail_sessions_save_seconds",
            "Time to snapshot and durably save one session (saves overlapped in one batch share its time)",
            ["service"],
            registry=registry,
        ).labels(service)
        self.snapshot_bytes = Histogram(
            "runtrail_sessions_snapshot_bytes",
            "Size of saved snapshots",
            ["service"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        ).labels(service)
        self.pointers = Counter(
            "runtrail_sessions_pointers_total",
            "Latest-snapshot messages sent to the sessions topic, inline or by reference",
            ["service", "kind"],
            registry=registry,
        )
        self.tracked = Gauge(
            "runtrail_sessions_tracked",
            "Sessions held in memory",
            ["service"],
            registry=registry,
        ).labels(service)
        self.halted = Gauge(
            "runtrail_sessions_halted",
            "Sessions whose stored snapshot is corrupted or untrusted (not saved; their "
            "offsets are held until the snapshot is repaired)",
            ["service"],
            registry=registry,
        ).labels(service)
        self.http_requests = Counter(
            "runtrail_sessions_http_requests_total",
            "Session API requests by status",
            ["service", "status"],
            registry=registry,
        )

    def saved(self, trigger: str, size: int) -> None:
        self.saves.labels(self.service, trigger).inc()
        self.snapshot_bytes.observe(size)
