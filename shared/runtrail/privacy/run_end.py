"""The last sequence a run has on the events topic, read from the broker.

Why: an event appended to a run by another process than its agent (an erasure) must take the
next sequence, or the projection takes it for a duplicate; that process has no counter of its
own, so it reads the run's partition, the one the run's key hashes to.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.kafka.ends import data_ends, end_offsets
from runtrail.resume.partitioning import partition_for


def last_sequence(settings: Settings, tenant: str, run_id: str, timeout: float = 60.0) -> int:
    """The highest sequence of ``tenant``'s ``run_id`` on the events topic (0 if none)."""
    topic = settings.events_topic
    ends = end_offsets(settings, topic)
    partition = partition_for(run_id, len(ends))
    end = (
        data_ends(settings, topic, {partition: ends[partition]})[partition]
        if ends[partition]
        else 0
    )
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"runtrail-run-end-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
    )
    codec, key, last = EventCodec(), run_id.encode(), 0
    try:
        low = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
        consumer.assign([TopicPartition(topic, partition, low)])
        position = low
        deadline = time.monotonic() + timeout
        while position < end:
            # a short wait per batch: consume() waits its whole timeout for a full batch
            messages = consumer.consume(500, 0.5)
            if not messages and time.monotonic() > deadline:
                raise TimeoutError(f"{topic}[{partition}] not read to offset {end}")
            for msg in messages:
                if msg.error() is not None:
                    continue
                position = max(position, (msg.offset() or 0) + 1)
                if (
                    msg.key() != key
                    or dict(msg.headers() or {}).get("rt.tenant") != tenant.encode()
                ):
                    continue
                last = max(last, codec.decode(msg.value()).event.sequence)
    finally:
        consumer.close()
    return last
