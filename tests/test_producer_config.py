"""Every runtrail producer (the publisher, output topics, dead letters) gets its config from
one builder, which keeps the invariants whatever ``kafka_options`` say, and judges a record too
large by one set of error codes."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from runtrail.config import Settings
from runtrail.kafka.output_topic import output_producer_config
from runtrail.kafka.producer_config import (
    SIZE_ERRORS,
    dead_letter_config,
    producer_config,
    too_large,
)
from runtrail.kafka.retry import Backoff
from runtrail.kafka.topics import max_message_bytes
from runtrail.publisher.sender import PERMANENT_ERRORS

INVARIANTS = {"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"}


@pytest.fixture
def settings() -> Settings:
    # a secured cluster, and options that would break per-run order if they passed through
    options = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "enable.idempotence": "false",
        "acks": "1",
        "partitioner": "consistent_random",
    }
    return Settings(bootstrap_servers="127.0.0.1:1", kafka_options=options)


@pytest.mark.parametrize("build", ["publisher", "output", "dead letters"])
def test_every_producer_keeps_the_invariants_and_the_security_options(
    settings: Settings, build: str
) -> None:
    config = {
        "publisher": lambda: producer_config(settings),
        "output": lambda: output_producer_config(settings),
        "dead letters": lambda: dead_letter_config(settings, 1024),
    }[build]()
    assert {k: config[k] for k in INVARIANTS} == INVARIANTS
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert config["bootstrap.servers"] == "127.0.0.1:1"


def test_dead_letters_have_room_for_the_largest_legal_event(settings: Settings) -> None:
    config = dead_letter_config(settings, 5_000_000)
    assert config["message.max.bytes"] == max_message_bytes(5_000_000)


def test_one_set_of_size_errors() -> None:
    for code in (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
    ):
        assert too_large(KafkaError(code))
    assert not too_large(KafkaError(KafkaError._TRANSPORT))
    assert SIZE_ERRORS <= PERMANENT_ERRORS  # final for the publisher once sent alone


def test_a_backoff_keeps_its_delay_until_a_try_fails() -> None:
    backoff = Backoff(1.0, 4.0)
    assert 0.8 <= backoff.delay() <= 1.0
    assert 0.8 <= backoff.delay() <= 1.0  # looking does not grow it
    backoff.grow()
    assert 1.6 <= backoff.delay() <= 2.0
    assert 1.6 <= backoff.next_delay() <= 2.0
    assert 3.2 <= backoff.next_delay() <= 4.0
    assert 3.2 <= backoff.next_delay() <= 4.0  # bounded
    backoff.reset()
    assert backoff.delay() <= 1.0
