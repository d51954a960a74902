"""Where a topic's partitions end, for a reader: high watermarks and the offsets after the
last events a read-committed consumer receives.

A topic the outbox relay writes to holds transaction markers: a commit marker takes an offset
after a transaction's last event, and no consumer ever receives (or processes) it. "Everything
up to the end" therefore means :func:`data_ends`, not the high watermark, wherever a caller
waits for a consumer to have processed an offset (the dev stack's catch-up, the resume barrier).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from runtrail.config import Settings


def end_offsets(settings: Settings, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """Per partition, the high watermark (the offset the next message will get).

    Asked read-uncommitted: a read-committed consumer is told the last stable offset instead,
    which stops before an open transaction and would hide the events behind it."""
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"runtrail-watermarks-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "socket.timeout.ms": 10000,
                "isolation.level": "read_uncommitted",
            }
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise KafkaException(f"topic {topic!r} is not available")
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
            for p in sorted(metadata.partitions)
        }
    finally:
        consumer.close()


def data_ends(
    settings: Settings, topic: str, ends: Mapping[int, int] | None = None, timeout: float = 30.0
) -> dict[int, int]:
    """Per partition, the offset after its last event a (read-committed) consumer receives:
    the high watermark less any trailing transaction markers and aborted events. Read from
    the partition's tail, widened until an event is found or the partition's start."""
    ends = dict(ends) if ends is not None else end_offsets(settings, topic)
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"runtrail-data-ends-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            }
        )
    )
    found: dict[int, int] = {}
    try:
        for partition, end in ends.items():
            low = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
            window = 16
            while True:
                start = max(low, end - window)
                last = _last_event(consumer, topic, partition, start, end, timeout)
                if last is not None or start <= low:
                    found[partition] = 0 if last is None else last  # None: nothing to consume
                    break
                window *= 8
    finally:
        consumer.close()
    return found


def _last_event(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, timeout: float
) -> int | None:
    """The offset after the last event in ``[start, end)``, None if there is none.

    A read-committed fetch stops at the last stable offset: an end of partition below ``end``
    means a transaction is still open there, and its outcome decides whether its events count,
    so this waits for it (a relay's transaction lasts milliseconds; a dead one's is aborted by
    the broker after ``transaction.timeout.ms``)."""
    if start >= end:
        return None
    consumer.assign([TopicPartition(topic, partition, start)])
    last: int | None = None
    stable: int | None = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if (msg.offset() or 0) >= end:
                    return last
                stable = msg.offset()
                continue  # an open transaction holds the stable offset below the end
            offset = msg.offset()
            if offset is not None and offset < end:
                last = offset + 1
            if offset is not None and offset + 1 >= end:
                return last
        if stable is not None:
            raise KafkaException(
                f"{topic}[{partition}]: a transaction open at offset {stable} did not end "
                f"within {timeout:.0f}s (its producer may have died; the broker aborts it "
                "after transaction.timeout.ms)"
            )
        raise KafkaException(f"{topic}[{partition}]: no end of partition within {timeout:.0f}s")
    finally:
        consumer.unassign()
