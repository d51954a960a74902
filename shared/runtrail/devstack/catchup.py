"""Has a consumer group caught up? Committed offsets against the topic's end, from Kafka.

This is the demo's and the tests' "wait until the services have processed everything": a
service commits only after its output is durable, so a group whose committed offsets reached
the ends has written everything before them. It reads Kafka, not the services, so it works the
same on the local stack, in docker-compose or on a cluster.

A topic the outbox relay writes to holds transaction markers: a commit marker takes an offset
after a transaction's last event, and no consumer ever receives (or commits past) it. So the
ends waited for are :func:`data_ends`, the offset after each partition's last event, not the
high watermarks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from runtrail.config import Settings


def _consumer(settings: Settings, group: str) -> Consumer:
    return Consumer(
        settings.kafka_config(
            **{"group.id": group, "enable.auto.commit": False, "socket.timeout.ms": 10000}
        )
    )


def end_offsets(settings: Settings, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """Per partition, the high watermark (the offset the next message will get)."""
    consumer = _consumer(settings, f"runtrail-watermarks-{uuid.uuid4().hex[:8]}")
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
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
    """The offset after the last event in ``[start, end)``, None if there is none."""
    if start >= end:
        return None
    consumer.assign([TopicPartition(topic, partition, start)])
    last: int | None = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return last
                raise KafkaException(error)
            offset = msg.offset()
            if offset is not None and offset < end:
                last = offset + 1
            if offset is not None and offset + 1 >= end:
                return last
        raise KafkaException(f"{topic}[{partition}]: no end of partition within {timeout:.0f}s")
    finally:
        consumer.unassign()


def committed_offsets(
    settings: Settings, group: str, topic: str, partitions: Iterable[int], timeout: float = 10.0
) -> dict[int, int]:
    """Per partition, the group's committed offset (0 where nothing is committed yet)."""
    consumer = _consumer(settings, group)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        return {tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, timeout=timeout)}
    finally:
        consumer.close()


def group_lag(
    settings: Settings, group: str, topic: str, ends: Mapping[int, int] | None = None
) -> int:
    """Messages of ``topic`` the group has not committed past (against ``ends`` if given,
    else :func:`data_ends`)."""
    ends = dict(ends) if ends is not None else data_ends(settings, topic)
    committed = committed_offsets(settings, group, topic, ends)
    return sum(max(0, end - committed.get(p, 0)) for p, end in ends.items())


def wait_caught_up(
    settings: Settings,
    groups: Mapping[str, str],
    topic: str,
    *,
    timeout: float = 120.0,
    interval: float = 0.5,
) -> dict[str, int]:
    """Wait until every group (``name -> group``) committed up to the topic's ends (its last
    events, :func:`data_ends`) as they are now; returns the lag left per name (all zero unless
    ``timeout`` ran out)."""
    ends = data_ends(settings, topic)
    deadline = time.monotonic() + timeout
    lags = dict.fromkeys(groups, -1)
    while True:
        for name, group in groups.items():
            if lags[name] != 0:
                lags[name] = group_lag(settings, group, topic, ends)
        if all(lag == 0 for lag in lags.values()) or time.monotonic() >= deadline:
            return lags
        time.sleep(interval)
