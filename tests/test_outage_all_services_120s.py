"""The figure at 120 s: every service rides out a two-minute broker SIGKILL.

The long variants of tests/test_outage_all_services.py, in a file of their own so that the
suite's parallel processes run them beside each other rather than one after another.
"""

from __future__ import annotations

import pytest

from runtrail_tools.kafka.broker import LocalBroker
from tests.test_outage_all_services import Stack, scenario, stack  # noqa: F401  (a fixture)


@pytest.mark.slow
def test_every_service_rides_out_a_120s_broker_sigkill(
    restartable_broker: LocalBroker,
    stack: Stack,  # noqa: F811 (the fixture)
) -> None:
    scenario(restartable_broker, stack, 120, "sigkill")
