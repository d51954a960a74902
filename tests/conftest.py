"""Shared pytest configuration: the suite's tiers and order, the Kafka broker, PostgreSQL and
S3 (moto) fixtures, and the explorer tests' headless Chromium."""

pytest_plugins = [
    "tests.tiers",
    "tests.kafka_fixture",
    "tests.postgres_fixture",
    "tests.s3_fixture",
    "tests.ui_support",
]
