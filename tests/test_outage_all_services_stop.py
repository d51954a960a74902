"""The figure with `kafka down`, and services stopped (SIGTERM) in the middle of an outage.

The long variants of tests/test_outage_all_services.py, in a file of their own so that the
suite's parallel processes run them beside each other rather than one after another.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runtrail_tools.kafka.broker import LocalBroker
from tests.support import wait_for
from tests.test_outage_all_services import (  # stack is a fixture
    SERVICES,
    Expected,
    Stack,
    SteadyPublisher,
    missing,
    scenario,
    stack,  # noqa: F401
    workload,
)
from tests.test_outage_output_topics import sigkill


@pytest.mark.slow
def test_every_service_rides_out_a_30s_kafka_down(
    restartable_broker: LocalBroker,
    stack: Stack,  # noqa: F811 (the fixture)
) -> None:
    scenario(restartable_broker, stack, 30, "down")


@pytest.mark.slow
def test_services_stopped_during_an_outage_exit_cleanly_and_a_restart_loses_nothing(
    restartable_broker: LocalBroker,
    stack: Stack,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """SIGTERM while the broker is dead: each service stops within its shutdown bound with
    status 0 (no watchdog exit 2), commits nothing more; new processes finish the work."""
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    forms = workload()
    half = len(forms) // 2
    SteadyPublisher(bootstrap, forms[:half], rate_per_s=200).start().finish()
    wait_for(
        lambda: all(p.processed() >= half for p in stack.procs.values()),
        120,
        1.0,
        what="every service through the first half",
    )
    rest = SteadyPublisher(bootstrap, forms[half:], rate_per_s=50).start()
    time.sleep(1)
    sigkill(broker)
    wait_for(lambda: all(stack.readyz(s) == 503 for s in SERVICES), 60, 0.5, what="all 503")
    started = time.monotonic()
    statuses = stack.close()
    assert statuses == dict.fromkeys(SERVICES, 0), statuses
    assert time.monotonic() - started < 6 * 20  # each within its bound (15 s by default)
    broker.start()
    rest.finish(timeout=180)
    again = Stack(bootstrap, tmp_path)
    try:
        expected = Expected(forms, bootstrap)
        lacking: dict[str, str] = {}

        def complete() -> bool:
            lacking.clear()
            lacking.update(missing(again, expected, bootstrap))
            return not lacking

        try:
            wait_for(complete, 180, 1.0, what="every output complete")
        except AssertionError:
            raise AssertionError(f"outputs incomplete after the restart: {lacking}") from None
    finally:
        again.close()
