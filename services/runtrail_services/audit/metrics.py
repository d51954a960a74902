"""The audit service's own Prometheus series (beside the runtime's), labelled by service."""

from __future__ import annotations

import math
import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from runtrail.runtime.metrics import ServiceSeries


class AuditMetrics:
    """Links sealed and published, chains, checkpoints; updated once per batch or flush."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        series = ServiceSeries(service, registry)
        self.sealed = series.own(
            Counter, "runtrail_audit_links_sealed", "Links sealed and committed to the store."
        )
        self.redelivered = series.own(
            Counter,
            "runtrail_audit_redeliveries",
            "Events whose eventId was already sealed (same payload): not sealed again.",
        )
        self._refused = series.by(
            Counter,
            "runtrail_audit_events_refused",
            "Events dead-lettered instead of sealed, by reason (unsealable, audit-conflict).",
            "reason",
        )
        self.published = series.own(
            Counter,
            "runtrail_audit_links_published",
            "Links acknowledged by the audit topic (re-publications after a crash included).",
        )
        self.chains_started = series.own(
            Counter,
            "runtrail_audit_chains_started",
            "Runs seen with no link in the store yet (new chains).",
        )
        self.chains = series.own(
            Gauge,
            "runtrail_audit_chains",
            "Chains (runs) in the store, as counted at the last checkpoint.",
        )
        self.cached_heads = series.own(
            Gauge, "runtrail_audit_cached_heads", "Run heads held in memory."
        )
        self.checkpoints = series.own(
            Counter, "runtrail_audit_checkpoints", "Signed checkpoints made by this process."
        )
        self.checkpoint_size = series.own(
            Gauge, "runtrail_audit_checkpoint_size", "Leaves (run heads) in the latest checkpoint."
        )
        self._checkpoint_at: float | None = None
        series.own(
            Gauge,
            "runtrail_audit_checkpoint_age_seconds",
            "Seconds since the latest checkpoint in the store was signed (+Inf if none).",
        ).set_function(self._age)
        self._service = service

    def refused(self, reason: str, count: int) -> None:
        self._refused.labels(self._service, reason).inc(count)

    def checkpoint_seen(self, age_s: float, size: int) -> None:
        """The latest checkpoint in the store is ``age_s`` old and has ``size`` leaves."""
        self._checkpoint_at = time.time() - age_s
        self.checkpoint_size.set(size)

    def _age(self) -> float:
        if self._checkpoint_at is None:
            return math.inf
        return max(0.0, time.time() - self._checkpoint_at)
