"""The publisher's Prometheus metrics, plus plain counts for :meth:`Publisher.stats`.

Outcomes: ``sent`` (acknowledged by the broker, directly or from the spool), ``spooled``
(written to the spool), ``rejected`` (invalid, unencodable or refused by the broker as such),
``dropped`` (unreadable in the spool), ``recovered`` (unconfirmed, then found on the topic by the
recovery scan, so not resent). An event that was spooled and later sent counts in both
``spooled`` and ``sent``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

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


class PublisherMetrics:
    """Counters on ``registry`` (one publisher per registry) mirrored as plain integers."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._events = Counter(
            "runtrail_publisher_events",
            "Events handled by the publisher, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self._delivery_errors = Counter(
            "runtrail_publisher_delivery_errors",
            "Failed delivery reports (the event then goes to the spool).",
            registry=registry,
        )
        self._spool_depth = Gauge(
            "runtrail_publisher_spool_depth",
            "Events waiting in the spool for the broker (0 while publishing directly).",
            registry=registry,
        )
        for outcome in OUTCOMES:
            self._events.labels(outcome)  # export zeros from the start
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._errors = 0
        self._depth = 0
        self._lock = threading.Lock()

    def count(self, outcome: str, n: int = 1) -> None:
        if n <= 0:
            return
        self._events.labels(outcome).inc(n)
        with self._lock:
            self._counts[outcome] += n

    def delivery_error(self) -> None:
        self._delivery_errors.inc()
        with self._lock:
            self._errors += 1

    def set_spool_depth(self, depth: int) -> None:
        self._spool_depth.set(depth)
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
            )
