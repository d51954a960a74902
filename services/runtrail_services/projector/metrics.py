"""The projector's Prometheus series (beside the runtime's, in the same registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class ProjectorMetrics:
    """Per-process series, labelled by service like the runtime's."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        self.halted_runs = Gauge(
            "runtrail_projection_halted_runs",
            "Runs whose projection is halted in the store (an event could not be applied)",
            ["service"],
            registry=registry,
        ).labels(service)
        self._events = Counter(
            "runtrail_projection_events_total",
            "Events met by the projector, by outcome: applied, duplicate (already applied, "
            "no effect), halted (halted its run), skipped (its run is halted: it waits)",
            ["service", "outcome"],
            registry=registry,
        )
        self._halts = Counter(
            "runtrail_projection_halts_total",
            "Runs halted by this process, by reason",
            ["service", "reason"],
            registry=registry,
        )
        self.snapshots = Counter(
            "runtrail_projection_snapshots_total",
            "Run snapshots written",
            ["service"],
            registry=registry,
        ).labels(service)
        self.conflicts = Counter(
            "runtrail_projection_store_conflicts_total",
            "Flushes refused by the store's fences (another consumer moved the run or offset on)",
            ["service"],
            registry=registry,
        ).labels(service)

    def events(self, outcome: str) -> Counter:
        return self._events.labels(self.service, outcome)

    def halts(self, reason: str) -> Counter:
        return self._halts.labels(self.service, reason)
