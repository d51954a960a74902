"""The audit service's own Prometheus series (beside the runtime's), labelled by service."""

from __future__ import annotations

import math
import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from runtrail.runtime.metrics import ServiceSeries


class AuditMetrics:
    """Links sealed and published, chains, tree heads; updated once per batch or flush."""

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
            "Chains (runs) in the store, as counted at the last tree head.",
        )
        self.cached_heads = series.own(
            Gauge, "runtrail_audit_cached_heads", "Run heads held in memory."
        )
        self.tree_heads = series.own(
            Counter, "runtrail_audit_tree_heads", "Signed tree heads made by this process."
        )
        self.tree_head_size = series.own(
            Gauge, "runtrail_audit_tree_head_size", "Leaves (run heads) in the latest tree head."
        )
        self._tree_head_at: float | None = None
        series.own(
            Gauge,
            "runtrail_audit_tree_head_age_seconds",
            "Seconds since the latest tree head in the store was signed (+Inf if none).",
        ).set_function(self._age)
        self._service = service

    def refused(self, reason: str, count: int) -> None:
        self._refused.labels(self._service, reason).inc(count)

    def tree_head_seen(self, age_s: float, size: int) -> None:
        """The latest tree head in the store is ``age_s`` old and has ``size`` leaves."""
        self._tree_head_at = time.time() - age_s
        self.tree_head_size.set(size)

    def _age(self) -> float:
        if self._tree_head_at is None:
            return math.inf
        return max(0.0, time.time() - self._tree_head_at)
