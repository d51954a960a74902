"""A rolling restart of a three-broker cluster under load (the publisher, every service, the
outbox relay): each broker stopped cleanly and started again, the next one only once every
replica is back in sync, as an operator upgrades a cluster. Nothing lost, doubled or
reordered, no process exits, every output complete and every audit chain valid
(tests/cluster_outage.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from runtrail_tools.kafka.cluster import LocalCluster
from tests.cluster_outage import run_under_load, under_replicated
from tests.cluster_outage import stack as stack  # (a fixture)
from tests.support import wait_for
from tests.test_outage_all_services import Stack


def test_a_rolling_restart_under_load_loses_doubles_and_reorders_nothing(
    restartable_cluster: LocalCluster,
    stack: Stack,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    def roll(admin: AdminClient) -> None:
        for node in restartable_cluster.nodes:
            node.stop(timeout=60)
            assert not stack.dead(), f"exited while broker {node.node_id} was down"
            node.start(timeout=120)
            wait_for(lambda: not under_replicated(admin), 90, 0.5, what="replicas in sync")
            assert not stack.dead(), f"exited after broker {node.node_id} restarted"

    run_under_load("rolling-restart", restartable_cluster, stack, tmp_path, roll, record_property)
