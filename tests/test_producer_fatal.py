"""A producer that a fatal error ended is replaced, and nothing it held is lost or doubled:
the publisher's, an output topic's and the dead letters'.

librdkafka's fatal error is provoked for real, against the real broker: the first client is
told not to ask the broker's API versions and to assume 0.9.0, so with idempotence on (every
runtrail producer) it dies at once with "Idempotent producer not supported by any of the
connected brokers" — what a client that bootstraps against a broker still starting up was
seen to hit in CI. confluent-kafka raises that error from ``poll``/``flush``, never through
``error_cb`` (:mod:`runtrail.kafka.fatal`). Later clients get the config as given.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.kafka.fatal import fatal_error
from runtrail.kafka.output_topic import OutputTopic
from runtrail.kafka.producer_config import dead_letter_config
from runtrail.publisher import Publisher
from runtrail.runtime.deadletter import H_OFFSET, DeadLetterProducer
from tests.publisher_support import agent_settings, assert_in_order, contents
from tests.support import consume_all, create_topic, unique_topic
from tests.test_publisher_outage import SteadyAgent
from tests.test_runtime_outage import _dead_letter

#: a client that cannot learn the broker's features: fatal at once with idempotence on
DOOMED = {"api.version.request": False, "broker.version.fallback": "0.9.0"}


def test_every_form_the_client_raises_its_fatal_error_in_is_recognised() -> None:
    """The forms met against the real broker: the error itself; a ``SystemError`` caused by it
    (a delivery callback ran while it was pending); a ``SystemError`` with no trace of it (the
    client's log callback ran and cleared it, seen in CI); ``_FATAL`` from a later call."""
    error = KafkaError(
        KafkaError._UNSUPPORTED_FEATURE, "Idempotent producer not supported", fatal=True
    )
    caused = SystemError(
        "<method 'name' of 'KafkaError' objects> returned a result with an exception set"
    )
    caused.__cause__ = KafkaException(error)
    cleared = SystemError(
        "<method 'flush' of 'Producer' objects> returned NULL without setting an exception"
    )
    refused = KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message"))
    assert fatal_error(KafkaException(error)) is error
    assert fatal_error(caused) is error
    assert (found := fatal_error(cleared)) is not None and found.fatal()
    assert (found := fatal_error(refused)) is not None and found.code() == KafkaError._FATAL
    assert fatal_error(KafkaException(KafkaError(KafkaError._TRANSPORT, "down"))) is None
    assert fatal_error(ValueError("not the client")) is None


class FirstClientDoomed:
    """A producer factory whose first client meets the fatal error; the rest are real ones."""

    def __init__(self) -> None:
        self.made = 0

    def __call__(self, config: dict[str, Any]) -> Producer:
        self.made += 1
        return Producer({**config, **DOOMED} if self.made == 1 else config)


@pytest.mark.kafka
def test_the_publisher_replaces_a_client_a_fatal_error_ended_and_loses_nothing(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("fatal"), partitions=3)
    settings = agent_settings(kafka_bootstrap, topic, tmp_path / "spool", delivery_timeout_ms=3000)
    registry = CollectorRegistry()
    factory = FirstClientDoomed()
    runs = [f"run-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    publisher = Publisher(
        settings,
        retry_backoff_s=0.2,
        retry_backoff_max_s=1.0,
        registry=registry,
        producer_factory=factory,
    )
    try:
        with SteadyAgent(publisher, runs) as agent:
            time.sleep(3.0)
        assert publisher.drain(60), f"spool not drained: {publisher.stats()}"
        stats = publisher.stats()
    finally:
        publisher.close(timeout=20)
    assert factory.made == 2, f"{factory.made} Kafka clients made"
    assert stats.client_replacements == 1, stats
    assert registry.get_sample_value("runtrail_publisher_client_replacements_total") == 1
    assert stats.rejected == 0 and stats.dropped == 0, stats
    assert agent.slowest < 2.0, f"publish() blocked for {agent.slowest:.2f} s"
    published = agent.published
    found = contents(kafka_bootstrap, topic, len(published))
    assert set(found.counts) == set(published), "events missing or unexpected"
    assert not found.doubled, found.doubled
    assert_in_order(found)


@pytest.mark.kafka
def test_an_output_topic_replaces_a_producer_a_fatal_error_ended_within_one_confirm(
    kafka_bootstrap: str,
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("fatal-out"), partitions=1)
    factory = FirstClientDoomed()
    out = OutputTopic(
        Settings(bootstrap_servers=kafka_bootstrap),
        topic,
        client_id="fatal-test",
        producer_factory=factory,
    )
    values = [f"record {i}".encode() for i in range(50)]
    for value in values[:25]:
        out.send(b"k", value)
    time.sleep(1.0)  # the fatal error comes meanwhile: later sends are refused by the client
    out.poll()
    for value in values[25:]:
        out.send(b"k", value)
    out.confirm(30.0)
    out.close()
    assert factory.made == 2, f"{factory.made} Kafka clients made"
    assert out.unacknowledged == 0
    found = [m.value() for m in consume_all(kafka_bootstrap, topic, expect=len(values))]
    assert found == values


@pytest.mark.kafka
def test_the_dead_letters_replace_a_producer_a_fatal_error_ended_and_the_service_goes_on(
    kafka_bootstrap: str,
) -> None:
    dlq = create_topic(kafka_bootstrap, unique_topic("fatal-dlq"), partitions=1)
    factory = FirstClientDoomed()
    config = dead_letter_config(Settings(bootstrap_servers=kafka_bootstrap), 8 * 1024 * 1024)
    producer = DeadLetterProducer(config, dlq, "test", producer_factory=factory)

    for offset in range(5):
        _dead_letter(producer, offset, f"poison {offset}".encode())
    time.sleep(1.0)  # the fatal error comes meanwhile: later sends are refused by the client
    for offset in range(5, 10):
        _dead_letter(producer, offset, f"poison {offset}".encode())
    producer.flush(timeout=30)  # neither DeadLetterError nor the client's exception
    producer.close()
    assert factory.made == 2, f"{factory.made} Kafka clients made"
    assert producer.pending == 0
    dead = consume_all(kafka_bootstrap, dlq, expect=10, timeout=30)
    offsets = sorted(int(dict(m.headers())[H_OFFSET]) for m in dead)
    assert offsets == list(range(10)), offsets
