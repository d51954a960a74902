"""The backlog readers' consumer defaults: present, and below the user's options and the
caller's own settings."""

from __future__ import annotations

from runtrail.config import Settings
from runtrail.kafka.consumer_config import CATCH_UP_DEFAULTS, consumer_config


def test_the_catch_up_defaults_are_set() -> None:
    config = consumer_config(Settings(bootstrap_servers="b:9092"), **{"group.id": "g"})
    assert config["fetch.queue.backoff.ms"] == CATCH_UP_DEFAULTS["fetch.queue.backoff.ms"]
    assert config["group.id"] == "g"
    assert config["bootstrap.servers"] == "b:9092"


def test_kafka_options_and_overrides_win_over_the_defaults() -> None:
    settings = Settings(kafka_options={"fetch.queue.backoff.ms": "500"})
    assert consumer_config(settings)["fetch.queue.backoff.ms"] == "500"
    overridden = consumer_config(Settings(), **{"fetch.queue.backoff.ms": 50})
    assert overridden["fetch.queue.backoff.ms"] == 50
