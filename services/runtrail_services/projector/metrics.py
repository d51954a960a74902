"""The projector's Prometheus series (beside the runtime's, in the same registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from runtrail.runtime.metrics import ServiceSeries


class ProjectorMetrics:
    """Per-process series, labelled by service like the runtime's."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        series = ServiceSeries(service, registry)
        self.halted_runs = series.own(
            Gauge,
            "runtrail_projection_halted_runs",
            "Runs whose projection is halted in the store (an event could not be applied)",
        )
        self._events = series.by(
            Counter,
            "runtrail_projection_events_total",
            "Events met by the projector, by outcome: applied, duplicate (already applied, "
            "no effect), halted (halted its run), skipped (its run is halted: it waits)",
            "outcome",
        )
        self._halts = series.by(
            Counter,
            "runtrail_projection_halts_total",
            "Runs halted by this process, by reason",
            "reason",
        )
        self.snapshots = series.own(
            Counter, "runtrail_projection_snapshots_total", "Run snapshots written"
        )
        self.conflicts = series.own(
            Counter,
            "runtrail_projection_store_conflicts_total",
            "Flushes refused by the store's fences (another consumer moved the run or offset on)",
        )

    def events(self, outcome: str) -> Counter:
        return self._events.labels(self.service, outcome)  # type: ignore[no-any-return]

    def halts(self, reason: str) -> Counter:
        return self._halts.labels(self.service, reason)  # type: ignore[no-any-return]
