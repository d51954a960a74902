"""The latest record of every key of a compacted topic, read from its start to its current end.

Why: a compacted topic is a table (compaction keeps the latest value per key, a null value
deletes the key once compacted), so whoever must act on what it holds now (an erasure writing
tombstones) reads it whole, keeping per key the partition it lives in: a tombstone must land in
the same partition as the record it deletes, whatever partitioner wrote it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from confluent_kafka import Consumer, KafkaError, KafkaException

from runtrail.config import Settings
from runtrail.kafka import to_end
from runtrail.kafka.to_end import spans


@dataclass(frozen=True, slots=True)
class Latest:
    """The latest record of one key: where it lives and its value (None: a tombstone)."""

    partition: int
    value: bytes | None


def latest_records(settings: Settings, topic: str, timeout: float = 60.0) -> dict[bytes, Latest]:
    """Per key, the latest record of ``topic`` up to the end each partition has now; nothing
    for a topic that does not exist (no service ever wrote it)."""
    latest: dict[bytes, Latest] = {}

    def keep(partition: int, key: bytes | None, value: bytes | None) -> None:
        if key is not None:
            latest[key] = Latest(partition, value)

    consumer = whole_topic_reader(settings, "runtrail-compacted-")
    try:
        described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if described is None or _missing(described.error):
            return latest
        read_to_end(consumer, topic, sorted(described.partitions), keep, timeout)
    finally:
        consumer.close()
    return latest


def whole_topic_reader(settings: Settings, group_prefix: str) -> Consumer:
    """A consumer in a group of its own that never commits: each reader reads from the start."""
    return Consumer(
        settings.kafka_config(
            **{
                "group.id": f"{group_prefix}{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
    )


def read_to_end(
    consumer: Consumer,
    topic: str,
    partitions: Iterable[int],
    apply: Callable[[int, bytes | None, bytes | None], None],
    timeout: float,
) -> None:
    """``apply(partition, key, value)`` for every record of ``partitions`` from the start to the
    end each has now, in offset order per partition; :class:`TimeoutError` past ``timeout``.

    Read by :func:`runtrail.kafka.to_end.read_to_end`: a partition is done once the position
    reaches the end seen at the start, whatever compaction, retention or transaction markers
    left just before it (a partition whose records were all deleted is not waited for)."""
    ranges = spans(consumer, topic, partitions, timeout=timeout)
    for batch in to_end.read_to_end(consumer, topic, ranges, timeout=timeout):
        for msg in batch:
            if msg.error() is None:
                apply(cast(int, msg.partition()), msg.key(), msg.value())


def _missing(error: KafkaError | None) -> bool:
    """The topic does not exist; any other metadata error is raised."""
    if error is None:
        return False
    if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return True
    raise KafkaException(error)
