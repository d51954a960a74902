"""The publisher's counts for :meth:`Publisher.stats`, exported to Prometheus when asked.

Prometheus is optional: an agent that only publishes needs no prometheus-client (the
``services`` extra); the counters exist only on a registry the caller passes.

Outcomes: ``sent`` (acknowledged by the broker, directly or from the spool), ``spooled``
(written to the spool), ``rejected`` (invalid, unencodable or refused by the broker as such),
``dropped`` (unreadable in the spool), ``recovered`` (unconfirmed, then found on the topic by the
recovery scan, so not resent). An event that was spooled and later sent counts in both
``spooled`` and ``sent``. Beside them: failed delivery reports, the spool's depth, and the
Kafka clients replaced because they had lost every broker for good.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtrail.extras import require

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

OUTCOMES = ("sent", "spooled", "rejected", "dropped", "recovered")


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """A snapshot of what the publisher did so far."""

    sent: int
    spooled: int
    rejected: int
    dropped: int
    delivery_errors: int
    spool_depth: int
    spooling: bool
    recovered: int = 0
    client_replacements: int = 0


class PublisherMetrics:
    """Plain integer counts, mirrored on Prometheus counters when a ``registry`` is given
    (one publisher per registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._exported = None if registry is None else _Exported(registry)
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._errors = 0
        self._depth = 0
        self._replacements = 0
        self._lock = threading.Lock()

    def count(self, outcome: str, n: int = 1) -> None:
        if n <= 0:
            return
        if self._exported is not None:
            self._exported.events.labels(outcome).inc(n)
        with self._lock:
            self._counts[outcome] += n

    def delivery_error(self) -> None:
        if self._exported is not None:
            self._exported.delivery_errors.inc()
        with self._lock:
            self._errors += 1

    def client_replaced(self) -> None:
        if self._exported is not None:
            self._exported.client_replacements.inc()
        with self._lock:
            self._replacements += 1

    def set_spool_depth(self, depth: int) -> None:
        if self._exported is not None:
            self._exported.spool_depth.set(depth)
        with self._lock:
            self._depth = depth

    def snapshot(self, spooling: bool) -> PublisherStats:
        with self._lock:
            return PublisherStats(
                sent=self._counts["sent"],
                spooled=self._counts["spooled"],
                rejected=self._counts["rejected"],
                dropped=self._counts["dropped"],
                delivery_errors=self._errors,
                spool_depth=self._depth,
                spooling=spooling,
                recovered=self._counts["recovered"],
                client_replacements=self._replacements,
            )


class _Exported:
    """The publisher's metrics on a Prometheus registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        prometheus = require("prometheus_client", "Publisher metrics on a Prometheus registry")
        self.events = prometheus.Counter(
            "runtrail_publisher_events",
            "Events handled by the publisher, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.delivery_errors = prometheus.Counter(
            "runtrail_publisher_delivery_errors",
            "Failed delivery reports (the event then goes to the spool).",
            registry=registry,
        )
        self.client_replacements = prometheus.Counter(
            "runtrail_publisher_client_replacements",
            "Kafka clients replaced by a new one: a fatal error ended them, or their statistics "
            "listed no broker for 10 s (a client that lost every broker does not find one again "
            "by itself).",
            registry=registry,
        )
        self.spool_depth = prometheus.Gauge(
            "runtrail_publisher_spool_depth",
            "Events waiting in the spool for the broker (0 while publishing directly).",
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.events.labels(outcome)  # export zeros from the start
