"""Where each partition of the events topic stands, as the link store records it.

Two positions per partition, both in the store's offsets table:

* **sealed** — under the events topic's own name, written in the same transaction as the links
  (exactly-once into the store: after a crash the store holds a batch and its offset, or
  neither);
* **published** — under ``<topic>#published`` (``#`` cannot occur in a Kafka topic name, so it
  cannot clash), written after the audit topic acknowledged the links of everything below it.

On assignment the service starts at the published position: events between it and the sealed
one are already sealed (the eventId check finds them) and their stored links are published
again, so the audit topic is at-least-once even across a crash between the store's commit
and the topic's acknowledgement. A partition sealed but never confirmed published (a crash
in its very first flush, or publishing just switched on) is replayed from its beginning. With
publishing off the service starts at the sealed position; with no position at all, at the
beginning of the partition (a chain must start at a run's first event, whatever offsets the
consumer group may have committed before).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING

from runtrail.audit.store import LinkStore, TopicPartition
from runtrail.runtime.delivery import Partition

PUBLISHED_SUFFIX = "#published"


def published_name(topic: str) -> str:
    return topic + PUBLISHED_SUFFIX


def sealed_positions(offsets: Mapping[Partition, int]) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, partition): o for (topic, partition), o in offsets.items()}


def published_positions(offsets: Mapping[Partition, int]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(published_name(topic), partition): o
        for (topic, partition), o in offsets.items()
    }


@dataclass
class StartPositions:
    """Where to seek each partition, and below which offset events are already sealed."""

    start: dict[Partition, int] = field(default_factory=dict)
    sealed: dict[Partition, int] = field(default_factory=dict)


def start_positions(
    store: LinkStore, partitions: Sequence[Partition], *, publishing: bool
) -> StartPositions:
    """The start of each assigned partition, read from the store."""
    result = StartPositions()
    for topic in sorted({t for t, _ in partitions}):
        numbers = [p for t, p in partitions if t == topic]
        sealed = store.stored_offsets(topic, numbers)
        published = store.stored_offsets(published_name(topic), numbers) if publishing else {}
        for number in numbers:
            key = (topic, number)
            if number not in sealed:
                result.start[key] = OFFSET_BEGINNING
                continue
            result.sealed[key] = sealed[number]
            if not publishing:
                result.start[key] = sealed[number]
            elif number in published:
                result.start[key] = min(published[number], sealed[number])
            else:  # sealed, never confirmed published (first flush cut short): from the start
                result.start[key] = OFFSET_BEGINNING
    return result
