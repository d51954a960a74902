"""A broker of a three-broker cluster SIGKILLed under load (the publisher, every service, the
outbox relay), kept down, then started again: nothing lost, doubled or reordered, no process
exits, every output complete and every audit chain valid (tests/cluster_outage.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from runtrail_tools.kafka.cluster import LocalCluster
from tests.cluster_outage import leaders, run_under_load
from tests.cluster_outage import stack as stack  # (a fixture)
from tests.test_outage_all_services import TOPIC, Stack
from tests.test_outage_output_topics import sigkill

DOWN_S = 12


def test_a_broker_sigkilled_under_load_loses_doubles_and_reorders_nothing(
    restartable_cluster: LocalCluster,
    stack: Stack,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    def kill_the_busiest_broker(admin: AdminClient) -> None:
        busiest = leaders(admin, TOPIC).most_common(1)[0][0]
        victim = restartable_cluster.nodes[busiest - 1]
        sigkill(victim)
        deadline = time.monotonic() + DOWN_S
        while time.monotonic() < deadline:
            assert not stack.dead(), f"exited while a broker was down: {stack.dead()}"
            time.sleep(0.5)
        victim.start(timeout=120)

    run_under_load(
        "broker-kill",
        restartable_cluster,
        stack,
        tmp_path,
        kill_the_busiest_broker,
        record_property,
    )
