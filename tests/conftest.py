"""Shared pytest configuration: the suite's tiers and order, the Kafka broker, PostgreSQL and
S3 (moto) fixtures."""

pytest_plugins = [
    "tests.tiers",
    "tests.kafka_fixture",
    "tests.postgres_fixture",
    "tests.s3_fixture",
]
