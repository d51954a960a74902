"""Where a partition ends for a reader, when a transactional producer (the outbox relay) shares it
with plain publishers: the resume barrier and the catch-up waits must name the last *event*, never
a commit marker no consumer processes (the demo's resume waited 10 s for one, then failed), and an
open transaction is waited for rather than guessed."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from runtrail.config import Settings
from runtrail.kafka.ends import data_ends
from runtrail.resume.barrier import resume_barrier
from tests.kafka_fixture import TopicFactory

pytestmark = [pytest.mark.kafka]


def _plain(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _transactional(bootstrap: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"ends-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    return producer


def test_the_resume_barrier_names_the_last_event_not_a_trailing_commit_marker(
    kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory(1)
    settings = Settings(bootstrap_servers=kafka_bootstrap, events_topic=topic)
    _plain(kafka_bootstrap, topic, [b"agent-0", b"agent-1", b"agent-2"])  # offsets 0..2
    relay = _transactional(kafka_bootstrap)
    relay.begin_transaction()
    relay.produce(topic, b"relayed", partition=0)  # offset 3, its commit marker at 4
    relay.commit_transaction(30)
    # the high watermark is 5; a consumer processes offset 3 at most
    assert resume_barrier(settings, "any-run") == {0: 3}


def test_an_aborted_trailing_transaction_is_not_waited_for(
    kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory(1)
    settings = Settings(bootstrap_servers=kafka_bootstrap, events_topic=topic)
    _plain(kafka_bootstrap, topic, [b"agent-0", b"agent-1"])
    relay = _transactional(kafka_bootstrap)
    relay.begin_transaction()
    relay.produce(topic, b"aborted", partition=0)
    relay.flush(30)
    relay.abort_transaction(30)
    assert data_ends(settings, topic) == {0: 2}
    assert resume_barrier(settings, "any-run") == {0: 1}


def test_an_open_transaction_is_waited_for_and_its_events_then_count(
    kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory(1)
    settings = Settings(bootstrap_servers=kafka_bootstrap, events_topic=topic)
    relay = _transactional(kafka_bootstrap)
    relay.begin_transaction()
    relay.produce(topic, b"in-flight", partition=0)  # offset 0, still open
    relay.flush(30)
    _plain(kafka_bootstrap, topic, [b"agent-after"])  # offset 1, behind the open transaction
    time.sleep(0.5)

    def commit_soon() -> None:
        time.sleep(1.5)
        relay.commit_transaction(30)

    committer = threading.Thread(target=commit_soon)
    started = time.monotonic()
    committer.start()
    try:
        ends = data_ends(settings, topic, timeout=20)
    finally:
        committer.join(30)
    assert ends == {0: 2}  # the plain event after the transaction counts once it is stable
    assert time.monotonic() - started >= 1.0  # it waited for the commit, it did not guess
