"""Shared pytest configuration: loads the Kafka broker, PostgreSQL and S3 (moto) fixtures."""

pytest_plugins = ["tests.kafka_fixture", "tests.postgres_fixture", "tests.s3_fixture"]
