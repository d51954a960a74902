"""The local KRaft broker: tooling checks without Java, then real start/stop/restart cycles."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from runtrail.kafka.topics import wait_for_topics
from runtrail_tools.cli.main import main
from runtrail_tools.kafka.broker import BrokerError, LocalBroker, new_cluster_id
from runtrail_tools.kafka.deploy import (
    DEPLOY_DIR_ENV,
    kafka_deploy_dir,
    kafka_pom,
    kafka_version,
    render_template,
)
from runtrail_tools.kafka.jars import distribution_libs, fetch_jars, find_java, parse_java_version
from runtrail_tools.kafka.ports import free_ports, port_accepts
from runtrail_tools.pids import pid_alive

# --- without a JVM ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "22-ea" 2024-03-19', 22),
    ],
)
def test_java_version_is_parsed(output: str, major: int) -> None:
    assert parse_java_version(output) == major


def test_cluster_ids_are_22_url_safe_chars_never_starting_with_a_dash() -> None:
    ids = {new_cluster_id() for _ in range(3000)}
    assert len(ids) == 3000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(
        set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for i in ids
    )


def test_unreadable_java_version_is_an_error() -> None:
    with pytest.raises(BrokerError, match="Java version"):
        parse_java_version("command not found")


def test_missing_java_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match="java not found"):
        find_java()


def test_missing_maven_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match="mvn not found"):
        fetch_jars(tmp_path / "cache", kafka_pom())


def test_template_tokens_are_filled_and_a_missing_one_is_an_error() -> None:
    assert render_template("port=@PORT@ dir=@DIR@", {"PORT": "1", "DIR": "/d"}) == "port=1 dir=/d"
    with pytest.raises(BrokerError, match="@DIR@"):
        render_template("dir=@DIR@", {})


def test_deploy_dir_is_found_in_the_checkout_and_pins_kafka() -> None:
    deploy = kafka_deploy_dir()
    assert (deploy / "server.properties.template").is_file()
    assert (deploy / "log4j2.yaml").is_file()
    assert kafka_version(kafka_pom()).split(".")[0] >= "4"


def test_pom_pins_slf4j_2_so_the_broker_logs() -> None:
    pom = kafka_pom().read_text()
    assert "<artifactId>slf4j-api</artifactId>" in pom
    assert "log4j-slf4j2-impl" in pom


def test_deploy_dir_override_must_hold_the_pom(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(DEPLOY_DIR_ENV, str(tmp_path))
    with pytest.raises(BrokerError, match=DEPLOY_DIR_ENV):
        kafka_deploy_dir()
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "pom.xml").write_text("<project/>")
    assert kafka_deploy_dir() == (tmp_path / "kafka").resolve()


def test_kafka_home_must_be_a_distribution(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="not an unpacked Apache Kafka distribution"):
        distribution_libs(tmp_path)
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    assert distribution_libs(tmp_path) == (tmp_path / "libs").resolve()


def test_stop_without_start_is_harmless(tmp_path: Path) -> None:
    port, controller = free_ports(2)
    broker = LocalBroker(tmp_path / "kafka", port, controller, tmp_path / "cache")
    broker.stop()
    broker.stop()
    assert not broker.is_running()
    assert broker.bootstrap_servers == f"127.0.0.1:{port}"


def test_stale_pid_file_is_not_a_running_broker(tmp_path: Path) -> None:
    port, controller = free_ports(2)
    broker = LocalBroker(tmp_path, port, controller, tmp_path / "cache")
    broker.pid_file.write_text(f"{os.getpid()}\n")  # alive, but not a broker of this home
    assert not broker.is_running()


def test_start_refuses_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (controller,) = free_ports(1)
        broker = LocalBroker(tmp_path / "kafka", port, controller, tmp_path / "cache")
        with pytest.raises(BrokerError, match="already in use"):
            broker.start()


def test_same_port_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="two ports"):
        LocalBroker(tmp_path, 9092, 9092, tmp_path)


def test_status_of_a_missing_broker_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["kafka", "status", "--state-dir", str(tmp_path)]) == 3
    assert "not running" in capsys.readouterr().out


# --- with a real broker -------------------------------------------------------------------


def _high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "runtrail-test-watermark"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        return int(high)
    finally:
        consumer.close()


@pytest.mark.kafka
def test_broker_starts_logs_stops_and_restarts_with_its_data(
    restartable_broker: LocalBroker,
) -> None:
    broker = restartable_broker
    assert broker.is_running()
    pid = broker.pid
    assert pid is not None
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert broker.node_id in admin.list_topics(timeout=10).brokers
    state = broker.read_state()
    assert state is not None and state.bootstrap_servers == broker.bootstrap_servers

    # The log4j2 binding is on the classpath: the broker writes its own log file.
    assert "Kafka Server started" in broker.server_log.read_text()
    assert "SLF4J" not in broker.stdout_log.read_text()

    admin.create_topics([NewTopic("kept", num_partitions=3)])["kept"].result(timeout=30)
    wait_for_topics(admin, ["kept"], timeout=30)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("kept", key=b"run-1", value=b"event", partition=0)
    assert producer.flush(30) == 0

    broker.stop()
    assert not broker.is_running()
    assert not pid_alive(pid)
    assert not port_accepts(broker.port)
    assert not port_accepts(broker.controller_port)
    assert not broker.pid_file.exists()
    broker.stop()  # idempotent

    broker.start()
    assert broker.is_running()
    assert broker.pid != pid
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    wait_for_topics(admin, ["kept"], timeout=30)
    assert len(admin.list_topics(timeout=10).topics["kept"].partitions) == 3
    assert _high_watermark(broker.bootstrap_servers, "kept") == 1


@pytest.mark.kafka
def test_cli_sees_and_stops_a_broker_it_did_not_start(
    restartable_broker: LocalBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = restartable_broker
    assert broker.home == (tmp_path / "kafka").resolve()
    pid = broker.pid
    assert pid is not None

    assert main(["kafka", "status", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert broker.bootstrap_servers in out and str(pid) in out

    port_args = ["--port", str(broker.port), "--controller-port", str(broker.controller_port)]
    assert main(["kafka", "up", "--state-dir", str(tmp_path), *port_args]) == 0
    assert "already running" in capsys.readouterr().out

    port, controller = free_ports(2)
    other_ports = LocalBroker(broker.home, port, controller, broker.cache_dir)
    with pytest.raises(BrokerError, match="already runs on"):
        other_ports.start(timeout=5)
    assert broker.pid == pid  # refused without harm

    assert main(["kafka", "down", "--state-dir", str(tmp_path)]) == 0
    assert f"stopped (pid {pid})" in capsys.readouterr().out
    assert not broker.is_running()
    assert not pid_alive(pid)
    assert main(["kafka", "status", "--state-dir", str(tmp_path)]) == 3


@pytest.mark.kafka
def test_a_broker_that_dies_at_start_reports_its_log(tmp_path: Path) -> None:
    from tests.kafka_fixture import unavailable

    port, controller = free_ports(2)
    broker = LocalBroker(tmp_path / "kafka", port, controller, _cache_dir(), heap="1k")
    try:
        broker.ensure_jars()
    except BrokerError as exc:
        unavailable(str(exc))
    with pytest.raises(BrokerError, match="exited while starting") as failure:
        broker.start(timeout=60)
    assert "heap" in str(failure.value).lower()
    assert not broker.is_running()


def _cache_dir() -> Path:
    from runtrail.config import Settings

    return Settings().kafka_cache_dir
