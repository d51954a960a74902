"""Prometheus series of the capture service, beside the runtime's own in the same registry.

Counters move once per batch (not per record) to keep the hot path lean. The open-nodes gauge
is set from the consume loop rather than read at scrape time, because the pairer's maps are not
safe to walk from the HTTP thread while the loop mutates them.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from runtrail.capture import NODE_TYPES, NodeIoRecord
from runtrail.runtime.metrics import ServiceSeries

_FLUSH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class CaptureMetrics:
    """Records written by node type, incomplete flushes, open nodes, sink flush latency."""

    def __init__(self, service: str, registry: CollectorRegistry) -> None:
        series = ServiceSeries(service, registry)
        records = series.by(
            Counter,
            "runtrail_capture_records",
            "Node records handed to the sink, by node type (re-captures after a crash count again).",
            "node_type",
        )
        incomplete = series.by(
            Counter,
            "runtrail_capture_incomplete",
            "Records marked incomplete (idle expiry or a sequence gap), by node type.",
            "node_type",
        )
        self._dropped = series.by(
            Counter,
            "runtrail_capture_dropped_events",
            "Events that formed no part of any record, by reason: no-open-request (a model "
            "event with no MODEL_REQUEST in its step), superseded-request (a call restarted by "
            "a second MODEL_REQUEST), duplicate (a redelivered sequence), late (its sequence "
            "was given up as a gap).",
            "reason",
        )
        self._service = service
        self.buffered_events = series.own(
            Gauge,
            "runtrail_capture_buffered_events",
            "Events waiting for a missing earlier sequence of their run (offsets held).",
        )
        self._records = {t: records.labels(service, t) for t in NODE_TYPES}
        self._incomplete = {t: incomplete.labels(service, t) for t in NODE_TYPES}
        self.open_nodes = series.own(
            Gauge,
            "runtrail_capture_open_nodes",
            "Nodes waiting for their closing event (STEP_END or TOOL_RESULT).",
        )
        self.sink_flush_seconds = series.own(
            Histogram,
            "runtrail_capture_sink_flush_seconds",
            "Time to make written records durable (fsync, upload) before a commit.",
            buckets=_FLUSH_BUCKETS,
        )

    def dropped(self, reasons: Mapping[str, int]) -> None:
        """Count a batch's dropped events by reason."""
        for reason, count in reasons.items():
            self._dropped.labels(self._service, reason).inc(count)

    def written(self, records: Sequence[NodeIoRecord]) -> None:
        """Count a batch of records by node type, and the incomplete ones among them."""
        by_type = Tally(r.node_type for r in records)
        for node_type, count in by_type.items():
            self._records[node_type].inc(count)
        incomplete = Tally(r.node_type for r in records if r.incomplete)
        for node_type, count in incomplete.items():
            self._incomplete[node_type].inc(count)
