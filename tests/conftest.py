"""Shared pytest configuration: loads the Kafka broker fixtures."""

pytest_plugins = ["tests.kafka_fixture", "tests.postgres_fixture"]
