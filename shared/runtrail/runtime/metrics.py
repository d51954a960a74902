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


class ServiceSeries:
    """Makes a service's series in its process registry, each labelled ``service``: the
    runtime's and every service's own, so one dashboard query selects a service's series."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        self.registry = registry

    def own(self, kind: Any, name: str, doc: str, **extra: Any) -> Any:
        """A series of this service alone (the ``service`` label set)."""
        return kind(name, doc, ["service"], registry=self.registry, **extra).labels(self.service)

    def by(self, kind: Any, name: str, doc: str, *labels: str, **extra: Any) -> Any:
        """A family labelled by service and ``labels``; children made on use."""
        return kind(name, doc, ["service", *labels], registry=self.registry, **extra)


class RuntimeMetrics:
    """The runtime's own series; services add theirs to the same registry."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        self.service = service
        self.registry = registry
        series = ServiceSeries(service, registry)
        own, by = series.own, series.by

        self.consumed = own(Counter, "runtrail_consumed", "Messages taken from Kafka.")
        self.processed = own(Counter, "runtrail_processed", "Events handed to the service.")
        self._dead = by(
            Counter,
            "runtrail_dead_lettered",
            "Messages sent to the dead-letter topic, by reason.",
            "reason",
        )
        self._sequence = by(
            Counter,
            "runtrail_sequence_anomalies",
            "Per-run sequence anomalies (gap, duplicate, reordered, conflict).",
            "kind",
        )
        # Start every known reason at 0, so rate() sees the first dead letter as an increase.
        for reason in DEAD_LETTER_REASONS:
            self._dead.labels(service, reason)
        for kind in ("gap", "duplicate", "reordered", "conflict"):
            self._sequence.labels(service, kind)
        self.handler_errors = own(
            Counter, "runtrail_handler_errors", "Batches whose handler raised."
        )
        self.commits = own(Counter, "runtrail_commits", "Offset commits.")
        self.rebalances = by(
            Counter, "runtrail_rebalances", "Rebalance callbacks, by kind.", "kind"
        )
        self.batch_seconds = own(
            Histogram,
            "runtrail_batch_seconds",
            "Time to decode and process one batch.",
            buckets=_LATENCY_BUCKETS,
        )
        self.commit_seconds = own(
            Histogram,
            "runtrail_commit_seconds",
            "Time to flush outputs and commit offsets.",
            buckets=_LATENCY_BUCKETS,
        )
        self.lag = by(
            Gauge,
            "runtrail_consumer_lag",
            "Messages between the committed offset and the high watermark, per partition.",
            "topic",
            "partition",
        )
        self.assigned = own(Gauge, "runtrail_assigned_partitions", "Partitions currently assigned.")
        self._unavailable = by(
            Gauge,
            "runtrail_store_unavailable",
            "1 while an output or the Kafka link cannot take writes and the runtime retries.",
            "what",
        )
        self._retries = by(
            Counter,
            "runtrail_retries",
            "Flush/commit attempts that failed with a retryable error, by what failed.",
            "what",
        )
        self.up = own(Gauge, "runtrail_service_up", "1 while the consume loop runs.")
        self.client_replacements = own(
            Counter,
            "runtrail_kafka_client_replacements",
            "Kafka clients replaced because the consumer group went without its coordinator "
            "past group_stuck_s, or the client knew no broker for 10 s (holding no partitions).",
        )
        self._dlq_limit_tripped = by(
            Gauge,
            "runtrail_dlq_limit_tripped",
            "1 while a partition is stopped by the dead-letter limit (its handler failed for "
            "too many events in a row or in its window): paused until a restart.",
            "topic",
            "partition",
        )

    def dead_lettered(self, reason: str) -> Any:
        return self._dead.labels(self.service, reason)

    def unavailable(self, what: str) -> Any:
        return self._unavailable.labels(self.service, what)

    def retries(self, what: str) -> Any:
        return self._retries.labels(self.service, what)

    def dlq_limit_tripped(self, topic: str, partition: int) -> Any:
        return self._dlq_limit_tripped.labels(self.service, topic, str(partition))

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
