"""Writes the cache to the compacted cache topic, before the store commits.

Order matters for a crash: records are produced and *acknowledged* first, then the store commits
the batch with its offsets. A crash in between makes the restarted service write the same
records again — harmless, compaction keeps one per key — whereas the other order could commit
offsets past entries the topic never got.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from runtrail.config import Settings
from runtrail.resume.builder import WriteBatch
from runtrail.resume.records import (
    Record,
    entry_record,
    intent_record,
    intent_tombstone,
    position_record,
    run_record,
)

log = logging.getLogger(__name__)


class CacheTopicError(RuntimeError):
    """Records could not be written; the flush fails so nothing is committed past them."""


def ensure_cache_topic(settings: Settings, timeout: float = 30.0) -> None:
    """Create the compacted cache topic if it is missing (``runtrail topics ensure`` would too)."""
    admin = AdminClient(settings.kafka_config())
    topic = settings.resume_cache_topic
    if topic in admin.list_topics(timeout=timeout).topics:
        return
    spec = NewTopic(
        topic,
        settings.partitions,
        settings.replication_factor,
        config={"cleanup.policy": "compact"},
    )
    future = admin.create_topics([spec], operation_timeout=timeout)[topic]
    try:
        future.result(timeout)
        log.info("created the compacted cache topic %s", topic)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def batch_records(batch: WriteBatch, events_topic: str) -> tuple[list[Record], list[Record]]:
    """The topic records of one flush: data (entries, intents — tombstones once closed — and
    run sequences), then positions. Positions are written only after every data record is
    acknowledged, so a reader that sees a position and then reads every partition to its end
    has seen everything that position covers."""
    data = [entry_record(e) for e in batch.entries.values()]
    for (tenant, run, iid), held in batch.intents.items():
        data.append(
            intent_record(held[0]) if held is not None else intent_tombstone(tenant, run, iid)
        )
    for (tenant, run), (sequence, _) in batch.runs.items():
        data.append(run_record(tenant, run, sequence))
    positions = [
        position_record(events_topic, partition, offset)
        for (topic, partition), offset in batch.offsets.items()
        if topic == events_topic
    ]
    return data, positions


class CacheTopicWriter:
    """An idempotent, acks=all producer to the cache topic."""

    def __init__(self, settings: Settings, flush_timeout_s: float = 30.0) -> None:
        self.topic = settings.resume_cache_topic
        self.flush_timeout_s = flush_timeout_s
        config: dict[str, Any] = settings.kafka_config(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "compression.type": settings.compression,
                "partitioner": "murmur2_random",
            }
        )
        self._producer = Producer(config)
        self._errors: list[str] = []

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err.str())

    def write(self, records: list[Record]) -> None:
        """Produce and wait for every acknowledgement; :class:`CacheTopicError` otherwise."""
        if not records:
            return
        self._errors.clear()
        for key, value in records:
            while True:
                try:
                    self._producer.produce(
                        self.topic, key=key, value=value, on_delivery=self._report
                    )
                    break
                except BufferError:
                    self._producer.poll(0.1)
        left = self._producer.flush(self.flush_timeout_s)
        if left or self._errors:
            raise CacheTopicError(
                f"{left} record(s) unacknowledged, errors: {sorted(set(self._errors))[:3]}"
            )

    def close(self) -> None:
        self._producer.flush(5)
