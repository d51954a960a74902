"""Prometheus metrics of a service process (one registry per process, labelled by service).

Counters are incremented once per batch, not per message, to keep the hot path lean.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from runtrail.events.errors import InvalidEvent, UndecodableEvent, UnknownEventType, UnknownSchema
from runtrail.events.limits import NonFinite, TooDeep, TooLarge

HANDLER_ERROR = "handler-error"

#: Why the runtime itself dead-letters a message (services may add their own reasons).
DEAD_LETTER_REASONS = (
    *(
        cls.reason
        for cls in (
            UndecodableEvent,
            UnknownSchema,
            UnknownEventType,
            InvalidEvent,
            TooLarge,
            TooDeep,
            NonFinite,
        )
    ),
    HANDLER_ERROR,
    "sequence-conflict",
)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RuntimeMetrics:
    """The runtime's own series; services add theirs to the same registry."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        self.registry = registry
        labels = ["service"]
        self.consumed = Counter(
            "runtrail_consumed", "Messages taken from Kafka.", labels, registry=registry
        ).labels(service)
        self.processed = Counter(
            "runtrail_processed", "Events handed to the service.", labels, registry=registry
        ).labels(service)
        self._dead = Counter(
            "runtrail_dead_lettered",
            "Messages sent to the dead-letter topic, by reason.",
            ["service", "reason"],
            registry=registry,
        )
        self._sequence = Counter(
            "runtrail_sequence_anomalies",
            "Per-run sequence anomalies (gap, duplicate, reordered, conflict).",
            ["service", "kind"],
            registry=registry,
        )
        # Start every known reason at 0, so rate() sees the first dead letter as an increase.
        for reason in DEAD_LETTER_REASONS:
            self._dead.labels(service, reason)
        for kind in ("gap", "duplicate", "reordered", "conflict"):
            self._sequence.labels(service, kind)
        self.handler_errors = Counter(
            "runtrail_handler_errors", "Batches whose handler raised.", labels, registry=registry
        ).labels(service)
        self.commits = Counter(
            "runtrail_commits", "Offset commits.", labels, registry=registry
        ).labels(service)
        self.rebalances = Counter(
            "runtrail_rebalances",
            "Rebalance callbacks, by kind.",
            ["service", "kind"],
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "runtrail_batch_seconds",
            "Time to decode and process one batch.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        ).labels(service)
        self.commit_seconds = Histogram(
            "runtrail_commit_seconds",
            "Time to flush outputs and commit offsets.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        ).labels(service)
        self.lag = Gauge(
            "runtrail_consumer_lag",
            "Messages between the committed offset and the high watermark, per partition.",
            ["service", "topic", "partition"],
            registry=registry,
        )
        self.assigned = Gauge(
            "runtrail_assigned_partitions",
            "Partitions currently assigned.",
            labels,
            registry=registry,
        ).labels(service)
        self._unavailable = Gauge(
            "runtrail_store_unavailable",
            "1 while an output or the Kafka link cannot take writes and the runtime retries.",
            ["service", "what"],
            registry=registry,
        )
        self._retries = Counter(
            "runtrail_retries",
            "Flush/commit attempts that failed with a retryable error, by what failed.",
            ["service", "what"],
            registry=registry,
        )
        self.up = Gauge(
            "runtrail_service_up", "1 while the consume loop runs.", labels, registry=registry
        ).labels(service)

    def dead_lettered(self, reason: str) -> Any:
        return self._dead.labels(self.service, reason)

    def unavailable(self, what: str) -> Any:
        return self._unavailable.labels(self.service, what)

    def retries(self, what: str) -> Any:
        return self._retries.labels(self.service, what)

    def sequence_anomaly(self, kind: str) -> Any:
        return self._sequence.labels(self.service, kind)

    def on_stats(self, stats_json: str) -> dict[str, Any]:
        """librdkafka statistics callback: per-partition consumer lag; returns the parsed stats."""
        stats: dict[str, Any] = orjson.loads(stats_json)
        for topic, tstats in stats.get("topics", {}).items():
            for pid, pstats in tstats.get("partitions", {}).items():
                if pid == "-1" or pstats.get("fetch_state") in (None, "none", "stopped"):
                    continue
                # lag behind the *committed* offset: what a crash right now would re-read
                lag = pstats.get("consumer_lag", -1)
                if lag is not None and lag >= 0:
                    self.lag.labels(self.service, topic, pid).set(lag)
        return stats

    def forget_partition(self, topic: str, partition: int) -> None:
        with contextlib.suppress(KeyError):
            self.lag.remove(self.service, topic, str(partition))
