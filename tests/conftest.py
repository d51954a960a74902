"""Shared pytest configuration: loads the Kafka broker, PostgreSQL and S3 (moto) fixtures."""

pytest_plugins = ["tests.kafka_fixture", "tests.postgres_fixture", "tests.s3_fixture"]


def pytest_collection_modifyitems(items: list) -> None:  # type: ignore[type-arg]
    """Files holding slow tests run first, in collection order otherwise.

    `make test` hands whole files to 3 processes (`--dist loadfile`) in collection order.
    The long reliability files (broker outages of 45-120 s, SIGKILL loops) sort late, so they
    started last and ran on while the other processes sat idle: about a third of the suite's
    wall time. Started first, they overlap with everything else."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: order kept within
