"""``runtrail kafka up --brokers 3``: a local KRaft cluster from the same jars, found again by
``kafka status`` and ``kafka down`` through its ``cluster.json``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from runtrail.kafka.client_log import client_logger
from runtrail_tools.cli.main import main
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.cluster import ClusterLayout, LocalCluster, cluster_ports
from runtrail_tools.kafka.ports import port_accepts, port_bindable
from tests.test_devstack_down import runtrail


def test_each_node_is_rendered_as_a_voter_of_one_quorum(tmp_path: Path) -> None:
    ports = cluster_ports(19092, 19093, 3)
    assert ports == [(19092, 19093), (19094, 19095), (19096, 19097)]
    cluster = LocalCluster(tmp_path / "kafka", ports, tmp_path / "cache")
    quorum = cluster.layout.quorum
    assert [v[:2] for v in quorum.voters] == [(1, 19093), (2, 19095), (3, 19097)]
    assert len({quorum.cluster_id, *(v[2] for v in quorum.voters)}) == 4
    for node in cluster.nodes:
        node.home.mkdir(parents=True)
        node._render_configs()
        config = dict(
            line.split("=", 1)
            for line in node.config_file.read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        assert config["node.id"] == str(node.node_id)
        assert config["controller.quorum.bootstrap.servers"] == (
            "127.0.0.1:19093,127.0.0.1:19095,127.0.0.1:19097"
        )
        assert config["default.replication.factor"] == "3"
        assert config["offsets.topic.replication.factor"] == "3"
        assert config["min.insync.replicas"] == config["transaction.state.log.min.isr"] == "2"
    # the layout, once written, wins: the storage was formatted with its quorum
    cluster.layout.save(cluster.layout_file)
    again = LocalCluster(tmp_path / "kafka", cluster_ports(29092, 29093, 3), tmp_path / "cache")
    assert again.layout == ClusterLayout.load(cluster.layout_file) == cluster.layout
    with pytest.raises(BrokerError, match="has 3 nodes, not 2"):
        LocalCluster(tmp_path / "kafka", cluster_ports(29092, 29093, 2), tmp_path / "cache")


def test_a_single_broker_keeps_its_own_quorum(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "kafka", 19092, 19093, tmp_path / "cache")
    broker.home.mkdir(parents=True)
    broker._render_configs()
    text = broker.config_file.read_text()
    assert "controller.quorum.bootstrap.servers=127.0.0.1:19093\n" in text
    assert "default.replication.factor=1\n" in text and "min.insync.replicas=1\n" in text


def _free_base() -> int:
    """A broker port whose cluster table (six ports from it) is free now."""
    for _ in range(200):
        base = random.randrange(20000, 32000, 2)
        if all(port_bindable(base + i) for i in range(6)):
            return base
    raise AssertionError("no free port table")


@pytest.mark.kafka
def test_kafka_up_brokers_3_then_status_and_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _free_base()
    state = ["--state-dir", str(tmp_path)]
    ports = ["--kafka-port", str(base), "--kafka-controller-port", str(base + 1)]
    try:
        assert main(["kafka", "up", "--brokers", "3", *ports, *state, "--timeout", "150"]) == 0
        out = capsys.readouterr().out
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 2},127.0.0.1:{base + 4}"
        assert f"kafka running at {bootstrap}" in out
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": client_logger()})
        assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]

        assert main(["kafka", "status", *state]) == 0  # found by its cluster.json
        assert bootstrap in capsys.readouterr().out
        assert main(["kafka", "up", "--brokers", "1", *state]) == 1  # not beside a cluster
        assert "a cluster of 3 brokers runs" in capsys.readouterr().err
    finally:
        assert main(["kafka", "down", *state]) == 0
    assert "kafka stopped (pids " in capsys.readouterr().out
    assert main(["kafka", "status", *state]) == 3


@pytest.mark.kafka
def test_dev_up_brokers_3_runs_the_stack_on_a_cluster(tmp_path: Path) -> None:
    state_dir = (tmp_path / "state").resolve()
    base = _free_base()
    flags = [
        "--state-dir", str(state_dir), "--port-base", str(find_free_base(["noop"])),
        "--kafka-port", str(base), "--kafka-controller-port", str(base + 1),
        "--service", "noop", "--no-ui", "--brokers", "3",
    ]  # fmt: skip
    up = runtrail("dev", "up", *flags)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        recorded = json.loads((state_dir / "dev" / "stack.json").read_text())
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 2},127.0.0.1:{base + 4}"
        assert recorded["bootstrap_servers"] == bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": client_logger()})
        topics = admin.list_topics(timeout=10).topics
        assert {len(p.replicas) for p in topics["runtrail.events"].partitions.values()} == {3}
        assert "differ" not in up.stdout  # created at the cluster's RF, no drift reported
    finally:
        down = runtrail("dev", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(port_accepts(base + 2 * i) for i in range(3))
