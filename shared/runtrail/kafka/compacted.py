"""The latest record of every key of a compacted topic, read from its start to its current end.

Why: a compacted topic is a table (compaction keeps the latest value per key, a null value
deletes the key once compacted), so whoever must act on what it holds now (an erasure writing
tombstones) reads it whole, keeping per key the partition it lives in: a tombstone must land in
the same partition as the record it deletes, whatever partitioner wrote it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from runtrail.config import Settings


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

    A partition is done at its last record, or once the position reaches the end seen at the
    start (compaction may have removed the records just before it)."""
    todo = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
        for p in partitions
    }
    todo = {p: end for p, end in todo.items() if end > 0}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
    deadline = time.monotonic() + timeout
    while todo:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {topic} {sorted(todo)} to its end took too long")
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is not None:
                continue
            partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
            apply(partition, msg.key(), msg.value())
            if offset + 1 >= todo.get(partition, 0):
                todo.pop(partition, None)
        for tp in consumer.position([TopicPartition(topic, p) for p in list(todo)]):
            if tp.offset >= todo.get(tp.partition, 1 << 62):
                todo.pop(tp.partition, None)  # the end is compaction's gap


def _missing(error: KafkaError | None) -> bool:
    """The topic does not exist; any other metadata error is raised."""
    if error is None:
        return False
    if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return True
    raise KafkaException(error)
