"""``runtrail run otlp-mapper``: the raw OTLP topic → runtrail events, as a consumer group.

The other half of the scaled-out ingest (:mod:`.forwarding` is the receivers' half): any number
of instances share the raw topic's partitions; each maps its partitions' traces
(:class:`~runtrail_services.otlp_ingest.mapper_state.PartitionMapping`) and sends the events to
the events topic (:class:`~runtrail_services.otlp_ingest.event_records.EventRecords`).

A raw service of the consumer runtime: its records come through the one consume loop and
commit procedure. At each flush every event sent is confirmed by the broker first (else
:class:`~runtrail.runtime.unavailable.StoreUnavailable`: nothing commits, the runtime retries),
then each partition is held at the first record of its oldest trace still known, so a mapper
killed at any point, or a partition moved to another instance, is mapped again from there and
writes the same events (duplicates consumers skip), never a conflicting sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from runtrail.config import Settings
from runtrail.kafka.output_topic import CONFIRM_TIMEOUT_S
from runtrail.runtime.delivery import Partition, RawRecord
from runtrail.runtime.service import RawService, ServiceContext
from runtrail_services.otlp_ingest.drop_records import MapperDrops, open_drops
from runtrail_services.otlp_ingest.event_records import EventRecords
from runtrail_services.otlp_ingest.mapper_state import PartitionMapping
from runtrail_services.otlp_ingest.metrics import IngestMetrics
from runtrail_services.otlp_ingest.settings import OtlpMapperSettings
from runtrail_services.otlp_ingest.trace_ledger import TraceLedger

#: how often ended traces are looked at by the clock (between records)
EXPIRY_INTERVAL_MS = 1000


class OtlpMapperService(RawService):
    name: ClassVar[str] = "otlp-mapper"
    default_port: ClassVar[int] = 9465

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.settings = OtlpMapperSettings.load(context.options)
        self.metrics = IngestMetrics(context.registry)
        self.events = EventRecords(context.settings)
        self.ledger = TraceLedger(context.settings)
        self.drops = MapperDrops(open_drops(context.settings), context.settings.otlp_raw_topic)
        self._partitions: dict[Partition, PartitionMapping] = {}
        self._expired_at = 0

    @classmethod
    def source_topic(cls, settings: Settings) -> str:
        return settings.otlp_raw_topic

    def on_assigned(self, partitions: Sequence[Partition]) -> None:
        self.ledger.restore([p for _, p in partitions])
        for tp in partitions:  # rebuilt from the commit, which is held at its oldest trace
            self._partitions[tp] = self._mapping(tp)

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        for tp in partitions:
            self._partitions.pop(tp, None)
        self.ledger.forget_partitions([p for _, p in partitions])
        self.drops.forget_partitions([p for _, p in partitions])

    def _mapping(self, tp: Partition) -> PartitionMapping:
        return PartitionMapping(self.settings, self.metrics, self.ledger, tp[1], self.drops)

    def process_raw(self, batch: Sequence[RawRecord]) -> None:
        for record in batch:
            mapping = self._partitions.get(record.source)
            if mapping is None:  # the runtime assigns a partition before any of its records
                topic, partition = record.source
                raise LookupError(
                    f"a record of {topic}[{partition}], which this mapper does not hold: a "
                    "partition's traces are mapped only from where its assignment starts"
                )
            mapping.apply(record, self.events)
        self.events.poll()

    def tick(self, now_ms: int) -> None:
        if now_ms - self._expired_at >= EXPIRY_INTERVAL_MS:
            self._expired_at = now_ms
            for mapping in self._partitions.values():
                mapping.expire_ended(now_ms)

    def flush(self) -> None:
        self.events.flush(CONFIRM_TIMEOUT_S)
        self.ledger.flush(CONFIRM_TIMEOUT_S)
        self.drops.flush()
        holds = {tp: hold for tp, m in self._partitions.items() if (hold := m.hold()) is not None}
        self.context.checkpoint.set_holds(holds)
        self.metrics.open_traces.set(sum(m.open_traces for m in self._partitions.values()))

    def close(self) -> None:
        self.events.close()
        self.ledger.close()
        self.drops.close()
