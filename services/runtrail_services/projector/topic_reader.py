"""Read a whole topic once, up to the high watermarks it had when the read started.

For rebuilds: a plain consumer with ``assign()`` — no group membership, no offset commits, so
a rebuild never disturbs the live service's group — reads every partition from its beginning
(or from the first offset at or after a timestamp, by ``offsets_for_times``) up to the high
watermark captured at the start. Events appended meanwhile belong to the live service, not to
this rebuild, so the rebuild ends at a well-defined position it can store with its rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from runtrail.config import Settings
from runtrail.kafka.consumer_config import consumer_config
from runtrail.kafka.to_end import ReadTimeout, Span, read_to_end


class TopicReadError(RuntimeError):
    """The topic cannot be read (missing, or the broker stopped answering)."""


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class BoundedTopicReader:
    """Yields the topic's messages in batches, partition order preserved, then stops."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        *,
        from_timestamp_ms: int | None = None,
        ranges: Sequence[PartitionRange] | None = None,
        config: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
        stall_timeout_s: float = 60.0,
    ) -> None:
        """``ranges`` (captured by another reader: a parallel rebuild's worker) reads only
        those partitions, between those offsets, instead of capturing the whole topic's; it
        may be set again between two :meth:`batches` (the next partitions, one consumer).
        ``config``: more consumer settings (a worker reading one partition at a time has the
        broker hold its fetches at the partition's end for less long)."""
        self.topic = topic
        self._timeout = timeout_s
        self._stall_timeout = stall_timeout_s
        self._consumer = Consumer(
            consumer_config(
                settings,
                **{
                    # librdkafka wants a group id even for assign(); nothing is ever committed.
                    "group.id": f"runtrail.replay.{uuid.uuid4().hex[:12]}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "client.id": "runtrail-replay",
                    **(config or {}),
                },
            )
        )
        if ranges is not None:
            self.ranges = list(ranges)
            return
        try:
            self.ranges = self._ranges(from_timestamp_ms)
        except BaseException:
            self._consumer.close()
            raise

    @property
    def total(self) -> int:
        """Messages between the starts and the captured high watermarks."""
        return sum(r.size for r in self.ranges)

    def _ranges(self, from_timestamp_ms: int | None) -> list[PartitionRange]:
        metadata = self._consumer.list_topics(self.topic, timeout=self._timeout)
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            why = found.error if found is not None and found.error is not None else "not found"
            raise TopicReadError(f"topic {self.topic!r}: {why}")
        partitions = sorted(found.partitions)
        bounds = {
            p: self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=self._timeout
            )
            for p in partitions
        }
        starts = {p: low for p, (low, _) in bounds.items()}
        if from_timestamp_ms is not None:
            wanted = [TopicPartition(self.topic, p, from_timestamp_ms) for p in partitions]
            for tp in self._consumer.offsets_for_times(wanted, timeout=self._timeout):
                high = bounds[tp.partition][1]
                starts[tp.partition] = tp.offset if tp.offset >= 0 else high  # none after T
        return [
            PartitionRange(p, min(max(starts[p], bounds[p][0]), bounds[p][1]), bounds[p][1])
            for p in partitions
        ]

    def batches(self, size: int = 2000) -> Iterator[list[Message]]:
        """Batches of messages until every partition reached its captured end."""
        ranges = [Span(r.partition, r.start, r.end) for r in self.ranges]
        try:
            for batch in read_to_end(
                self._consumer,
                self.topic,
                ranges,
                timeout=None,
                stall_timeout=self._stall_timeout,
                max_batch=size,
            ):
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        raise KafkaException(error)
                yield batch
        except ReadTimeout as exc:
            raise TopicReadError(
                f"no message from {self.topic} for {self._stall_timeout:.0f}s; "
                f"partitions {sorted(exc.left)} not finished"
            ) from exc

    def close(self) -> None:
        self._consumer.close()
