"""Catch-up on a topic a transactional producer (the outbox relay) writes: the commit marker
after a transaction's last event takes an offset no consumer receives or commits past, so a
group that committed its last event has caught up, and one that did not has not."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from runtrail.config import Settings
from runtrail_tools.devstack.catchup import data_ends, end_offsets, group_lag, wait_caught_up
from tests.kafka_fixture import TopicFactory

pytestmark = [pytest.mark.kafka]


def produce_in_transaction(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"catchup-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.commit_transaction(30)


def commit_at(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_a_trailing_commit_marker_is_no_lag_but_an_uncommitted_event_is(
    kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory(1)
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    produce_in_transaction(kafka_bootstrap, topic, [b"one", b"two", b"three"])
    # three events and the commit marker
    assert end_offsets(settings, topic) == {0: 4}
    assert data_ends(settings, topic) == {0: 3}

    done, behind = f"done-{uuid.uuid4().hex[:6]}", f"behind-{uuid.uuid4().hex[:6]}"
    commit_at(kafka_bootstrap, done, topic, 3)  # as a service commits: last event's offset + 1
    commit_at(kafka_bootstrap, behind, topic, 2)
    assert group_lag(settings, done, topic) == 0
    assert group_lag(settings, behind, topic) == 1
    lags = wait_caught_up(settings, {"done": done, "behind": behind}, topic, timeout=2)
    assert lags == {"done": 0, "behind": 1}


def test_a_partition_with_nothing_to_consume_has_no_lag(
    kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory(2)
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    produce_in_transaction(kafka_bootstrap, topic, [b"only"])
    assert data_ends(settings, topic) == {0: 1, 1: 0}
    group = f"never-{uuid.uuid4().hex[:6]}"
    assert group_lag(settings, group, topic) == 1  # never committed: the one event
    commit_at(kafka_bootstrap, group, topic, 1)
    assert wait_caught_up(settings, {"g": group}, topic, timeout=2) == {"g": 0}
