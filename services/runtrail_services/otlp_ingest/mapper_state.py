"""The mapping state of one raw-topic partition, rebuilt by reading the partition again.

Every record of a trace is on one partition (keyed ``tenant/traceId``), so a partition's
traces are mapped by one mapper at a time, in the order the receivers wrote them. The state is
what the single-process receiver holds (a :class:`~runtrail.adapters.otel_mapping.TraceMapper`
and a :class:`~runtrail.adapters.otel_logs.LogJoin` per tenant), plus per trace that state is
kept for a :class:`_Mark`: the offset of its first record, its next sequence, the span IDs and
records already applied. A trace nothing is kept for (no GenAI span yet: an HTTP service's
trace) has no mark and holds nothing.

Why a replay changes nothing: the offset committed for a partition is held at the first
record of its oldest trace still known (:meth:`PartitionMapping.hold`): open, with log records
waiting, or ended within ``ended_linger_ms``. After a crash or a rebalance the next owner
reads every such trace again from its first record, and mapping is a function of the
partition's records in order (each record mapped as one batch, expiry by the records'
timestamps, which the broker stamps on the raw topic, never this process's clock), so it makes
the same events. Each event's sequence is the
trace's count so far and its eventId a hash of tenant, run, sequence, span and type
(:func:`event_id`): what is already on the events topic comes again as a duplicate (same
eventId at the same sequence), which every consumer skips, never as a conflict.

A trace forgotten while open (silent for ``trace_idle_ms``) leaves its next sequence in the
mapper's trace ledger (:mod:`.trace_ledger`), so a later span of it continues the run's
numbering, also in a mapper started after the commit passed it.

Spans already applied to a trace (an exporter's retry through another receiver, a receiver's
spool resent) are dropped as ``duplicate-span``; a record applied already (the runtime retries
a failed batch one record at a time) is skipped.
"""

from __future__ import annotations

import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from runtrail.adapters.otel_logs import WAITED_TOO_LONG, LogView
from runtrail.adapters.otel_mapping import Out
from runtrail.adapters.otel_publish import TERMINAL, PublishOutcome, Submitter, publish_mapped
from runtrail.adapters.otel_spans import SpanView
from runtrail.drops.tally import DropTally
from runtrail.runtime.delivery import RawRecord
from runtrail_services.otlp_ingest.drop_records import MapperDrops
from runtrail_services.otlp_ingest.metrics import IngestMetrics
from runtrail_services.otlp_ingest.raw_records import (
    H_KIND,
    H_RECORD_ID,
    H_TENANT,
    LOGS,
    logs_of,
    spans_of,
)
from runtrail_services.otlp_ingest.settings import OtlpMapperSettings
from runtrail_services.otlp_ingest.tenant_mappers import TenantMappers
from runtrail_services.otlp_ingest.trace_ledger import TraceLedger

#: the namespace of the mapper's eventIds (UUID version 5)
EVENT_IDS = uuid.UUID("6c1c7a52-3a0e-5b8e-9f4e-2f7d4b0e8a11")

TraceKey = tuple[str, str]


def event_id(tenant: str, run_id: str, sequence: int, span_id: str, event_type: str) -> str:
    """The eventId of the event at ``sequence`` of a run, made from ``span_id``: the same
    event mapped again gets the same one; a different event at that sequence does not."""
    return str(uuid.uuid5(EVENT_IDS, f"{tenant}\n{run_id}\n{sequence}\n{span_id}\n{event_type}"))


@dataclass
class _Mark:
    """What the partition knows of one trace beside the mapper's own state."""

    first: int
    last_ms: int
    ended: bool = False
    next_sequence: int = 1
    spans: set[str] = field(default_factory=set)
    records: set[bytes] = field(default_factory=set)


@dataclass(eq=False)
class PartitionMapping:
    """Maps one partition's raw records; :meth:`hold` says where a replay must start."""

    settings: OtlpMapperSettings
    metrics: IngestMetrics
    ledger: TraceLedger
    partition: int
    drops: MapperDrops
    _tenants: TenantMappers = field(init=False)
    #: the traces known, least recently written first (expiry takes them from the front)
    _marks: OrderedDict[TraceKey, _Mark] = field(default_factory=OrderedDict, init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        self._tenants = TenantMappers(settings.max_traces, settings.session_resource_attribute)

    # --- applying a record ------------------------------------------------------------------
    def apply(self, record: RawRecord, sink: Submitter) -> None:
        tenant = (record.header(H_TENANT) or b"").decode()
        record_id = record.header(H_RECORD_ID) or b""
        kind = record.header(H_KIND)
        value = record.value or b"[]"
        logs = logs_of(value) if kind == LOGS else []
        spans = spans_of(value) if kind != LOGS else []
        trace_ids = {s.trace_id for s in spans} | {log.trace_id for log in logs}
        if len(trace_ids) != 1:
            raise ValueError(f"a raw record holds one trace, this one {len(trace_ids)}")
        key = (tenant, trace_ids.pop())
        tally = DropTally()  # what this record did not record, by trace and reason
        try:
            self._apply(record, tenant, record_id, key, logs, spans, sink, tally)
        finally:
            self.drops.add(self.partition, record.offset, tenant, tally)

    def _apply(
        self,
        record: RawRecord,
        tenant: str,
        record_id: bytes,
        key: TraceKey,
        logs: list[LogView],
        spans: list[SpanView],
        sink: Submitter,
        tally: DropTally,
    ) -> None:
        self._expire(record.timestamp_ms, record.offset, tally)
        mark = self._marks.get(key)
        if mark is None:
            mark = self._marks[key] = _Mark(first=record.offset, last_ms=record.timestamp_ms)
            continued = self.ledger.next_sequence(self.partition, key, record.offset)
            if continued is not None:  # forgotten while open: its run goes on
                mark.next_sequence = continued
        elif record_id and record_id in mark.records:
            return  # applied already (a batch retried one record at a time)
        if record_id:
            mark.records.add(record_id)
        mark.last_ms = max(mark.last_ms, record.timestamp_ms)
        self._marks.move_to_end(key)
        if logs:
            self._apply_logs(tenant, logs, tally)
        else:
            self._apply_spans(key, mark, spans, sink, tally)
        if not (
            mark.ended
            or self._tenants.mapper(tenant).is_open(key[1])
            or self._tenants.join(tenant).waits_for(key[1])
        ):
            # nothing of it is kept (no GenAI span yet, say an HTTP service's trace): a replay
            # need not start at it, so it holds nothing
            self._drop(key, mark, record.offset)

    def _apply_logs(self, tenant: str, logs: list[LogView], tally: DropTally) -> None:
        refused = self._tenants.join(tenant).add(logs, tally)
        self.metrics.logs_taken("kept", len(logs), refused)

    def _apply_spans(
        self,
        key: TraceKey,
        mark: _Mark,
        spans: list[SpanView],
        sink: Submitter,
        tally: DropTally,
    ) -> None:
        tenant = key[0]
        fresh = [s for s in spans if s.span_id not in mark.spans]
        mark.spans.update(s.span_id for s in fresh)
        if len(fresh) < len(spans):
            self.metrics.spans("dropped", Counter({"duplicate-span": len(spans) - len(fresh)}))
            for span in spans:
                if span not in fresh:
                    tally.add(span.trace_id, "duplicate-span", span.name)
        if not fresh:
            return
        mapper = self._tenants.mapper(tenant)
        evicted = mapper.evicted

        def numbered(out: Out) -> tuple[str, int]:
            sequence = mark.next_sequence
            mark.next_sequence += 1
            return event_id(tenant, out.run_id, sequence, out.span_id, out.event_type), sequence

        mapped = mapper.map(self._tenants.join(tenant).attach(fresh))
        outcome: PublishOutcome = publish_mapped(sink, mapped, tenant=tenant, numbering=numbered)
        tally.update(outcome.tally)
        if any(out.event_type in TERMINAL for out in mapped.events):
            mark.ended = True
        self.metrics.evicted.inc(mapper.evicted - evicted)
        self.metrics.mapped(len(fresh), outcome)

    # --- expiry and the hold ----------------------------------------------------------------
    def _drop(self, key: TraceKey, mark: _Mark, offset: int) -> None:
        """Forget a trace's mark at raw ``offset``; one that numbered events and did not end
        leaves its next sequence in the ledger (a later span continues the run)."""
        del self._marks[key]
        if not mark.ended and mark.next_sequence > 1:
            self.ledger.forgotten(self.partition, key, offset, mark.next_sequence)

    def _expire(self, now_ms: int, offset: int, tally: DropTally) -> None:
        """Forget the traces idle past their bound, by the records' own timestamps (so a
        replay forgets them at the same record): an ended trace after ``ended_linger_ms``,
        an open one (its root never came) after ``trace_idle_ms``."""
        linger, idle = self.settings.ended_linger_ms, self.settings.trace_idle_ms
        while self._marks:
            key, mark = next(iter(self._marks.items()))
            age = now_ms - mark.last_ms
            if not (age > idle or (mark.ended and age > linger)):
                return
            self._drop(key, mark, offset)
            tenant, trace_id = key
            if not mark.ended and self._tenants.mapper(tenant).forget(trace_id):
                self.metrics.evicted.inc()
            dropped = self._tenants.join(tenant).drop_trace(trace_id, tally)
            if dropped:
                self.metrics.logs("dropped", Counter({WAITED_TOO_LONG: dropped}))

    def expire_ended(self, now_ms: int) -> None:
        """Forget the ended traces whose linger passed by ``now_ms`` (the clock: a partition
        that gets no new record still lets its commit reach the end). Safe by the clock, as by
        no record: an ended trace's mark changes no event, only where a replay starts."""
        linger = self.settings.ended_linger_ms
        for key in [k for k, m in self._marks.items() if m.ended and now_ms - m.last_ms > linger]:
            del self._marks[key]
            tenant, trace_id = key
            tally = DropTally()
            dropped = self._tenants.join(tenant).drop_trace(trace_id, tally)
            if dropped:
                self.metrics.logs("dropped", Counter({WAITED_TOO_LONG: dropped}))
                self.drops.add(self.partition, None, tenant, tally)

    def hold(self) -> int | None:
        """The offset a replay of this partition must start at: the first record of the
        oldest trace still known (None: nothing is, commit the position)."""
        return min((mark.first for mark in self._marks.values()), default=None)

    @property
    def open_traces(self) -> int:
        return self._tenants.open_traces
