"""The receiver of the scaled-out ingest: decoded spans and log records to the raw topic, as is.

Why: a receiver that maps holds each open trace's turns, steps and sequence counter in its
memory, so the spans of one trace that reach two receivers, or that arrive after a restart,
start a run's sequences again. A forwarding receiver holds no per-trace state: it writes each
request's spans (and log records) of one trace as one record keyed ``tenant/traceId``
(:mod:`.raw_records`) on the raw topic, and the mapper (``runtrail run otlp-mapper``), a
consumer group, maps each trace where its state is rebuilt from the topic. Any number of
receivers can run behind a load balancer.

Records go through the :class:`~runtrail.publisher.Publisher`'s write-ahead spool like events:
the request is answered 200 once its records are in the spool on disk (the next group commit,
``spool_commit_ms``), so a receiver killed after answering loses nothing, also while the
broker is away (a 503 would lose spans once the exporter's retry timeout ran out); a later
start of the receiver on the same spool folder sends what is left. What the receiver can tell alone is in the answer's ``partial_success``:
a log record without a span context or that is not a GenAI event, a record the publisher
refused. What mapping drops is counted by the mapper.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from runtrail.adapters.otel_logs import LogView, refusal
from runtrail.adapters.otel_publish import PublishOutcome
from runtrail.adapters.otel_spans import SpanView
from runtrail.drops.tally import NO_RUN, DropTally
from runtrail.publisher import Publisher
from runtrail.publisher.spool_record import SpoolRecord
from runtrail_services.otlp_ingest.drop_records import ReceiverDrops
from runtrail_services.otlp_ingest.metrics import IngestMetrics
from runtrail_services.otlp_ingest.raw_records import log_records, span_records

log = logging.getLogger(__name__)

#: how long a request waits for its records to be on disk
DURABLE_WAIT_S = 5.0


class Forwarder:
    """Spans and log records → raw records on ``publisher``'s topic; no state per trace.
    The log records it refuses go to ``drops`` by run and reason; the rest the mapper counts."""

    def __init__(
        self, publisher: Publisher, metrics: IngestMetrics, drops: ReceiverDrops | None = None
    ) -> None:
        self.publisher = publisher
        self.metrics = metrics
        self.drops = drops
        self.accepting = True

    def record(self, tenant: str, spans: list[SpanView]) -> PublishOutcome:
        outcome = PublishOutcome()
        for record, held in span_records(tenant, spans):
            if self._send(record, outcome):
                outcome.rejected_spans += held
        self._durable()
        forwarded = len(spans) - outcome.rejected_spans
        self.metrics.spans("forwarded", Counter({"": forwarded}))
        self.metrics.spans("rejected", outcome.rejected)
        return outcome

    def record_logs(self, tenant: str, logs: list[LogView]) -> Counter[str]:
        """Forward the log records that can join a span; those that cannot, by reason."""
        refused: Counter[str] = Counter()
        tally = DropTally()
        joinable = []
        for log in logs:
            reason = refusal(log)
            if reason is None:
                joinable.append(log)
            else:
                refused[reason] += 1
                tally.add(log.trace_id, reason, log.event_name or "(no event name)")
        outcome = PublishOutcome()
        for record in log_records(tenant, joinable):
            self._send(record, outcome)
        self._durable()
        rejected = {f"log-{reason}": n for reason, n in outcome.rejected.items()}
        refused.update(rejected)
        for reason, n in rejected.items():  # which trace each was of is not told back
            tally.add(NO_RUN, reason, "(refused by the publisher)", n)
        if self.drops is not None:
            self.drops.record(tenant, tally)
        self.metrics.logs_taken("forwarded", len(logs), refused)
        return refused

    def _durable(self) -> None:
        """Return once what this request forwarded survives this process (bounded: a disk
        that does not answer in time leaves it to the next group commit)."""
        if not self.publisher.wait_durable(time.monotonic_ns(), DURABLE_WAIT_S):
            log.warning("otlp-ingest: the spool did not confirm a write in %.0f s", DURABLE_WAIT_S)

    def _send(self, record: SpoolRecord, outcome: PublishOutcome) -> bool:
        """Hand one record to the publisher; True when it refused it (counted by reason)."""
        submitted = self.publisher.submit_record(record)
        if submitted.accepted:
            outcome.published += 1
            return False
        outcome.rejected[str(submitted.reason)] += 1
        return True
