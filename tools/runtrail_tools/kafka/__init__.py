"""A local Kafka broker for development and tests: its jars, its configuration, its ports."""
