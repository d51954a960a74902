"""Has a consumer group caught up? Committed offsets against the topic's end, from Kafka.

This is the demo's and the tests' "wait until the services have processed everything": a
service commits only after its output is durable, so a group whose committed offsets reached
the ends has written everything before them. It reads Kafka, not the services, so it works the
same on the local stack, in docker-compose or on a cluster.

A topic the outbox relay writes to holds transaction markers: a commit marker takes an offset
after a transaction's last event, and no consumer ever receives (or commits past) it. So the
ends waited for are :func:`data_ends`, the offset after each partition's last event, not the
high watermarks (:mod:`runtrail.kafka.ends`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, TopicPartition

from runtrail.config import Settings
from runtrail.kafka.ends import data_ends, end_offsets

__all__ = ["committed_offsets", "data_ends", "end_offsets", "group_lag", "wait_caught_up"]


def _consumer(settings: Settings, group: str) -> Consumer:
    return Consumer(
        settings.kafka_config(
            **{"group.id": group, "enable.auto.commit": False, "socket.timeout.ms": 10000}
        )
    )


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
