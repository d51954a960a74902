"""pytest plugin: a real Kafka broker for the tests that need one.

Where the broker comes from, first that works:

1. ``KAFKA_BOOTSTRAP_SERVERS``: an existing cluster;
2. testcontainers' Kafka module, when it is installed and a Docker engine answers
   (``RUNTRAIL_KAFKA_IMAGE`` picks the image);
3. a :class:`~runtrail_tools.kafka.broker.LocalBroker` on free loopback ports in a temporary folder
   (jars from the shared cache, so Maven fetches them once per machine). Under pytest-xdist one
   such broker serves every worker of the run: the first worker that needs it starts it, the
   controller stops it when the run ends. Each test's topics and groups are its own, so sharing
   changes nothing a test sees; a broker per worker cost every worker its start, its
   compiler's warm-up and its idle turns.

``RUNTRAIL_TEST_BROKER=local`` (or ``docker``) skips the other sources. When no broker can be
had, the tests that need one are skipped, or fail when ``RUNTRAIL_REQUIRE_SERVICES=1`` (as in
CI), so a missing broker never passes for a green run.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import re
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from runtrail.config import Settings
from runtrail.kafka.topics import TopicsError, delete_topics, wait_for_topics
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.cluster import LocalCluster
from runtrail_tools.kafka.ports import free_ports

REQUIRE_ENV = "RUNTRAIL_REQUIRE_SERVICES"
SOURCE_ENV = "RUNTRAIL_TEST_BROKER"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
IMAGE_ENV = "RUNTRAIL_KAFKA_IMAGE"
START_TIMEOUT_S = 120.0


def services_required() -> bool:
    """Whether a missing service must fail the run instead of skipping (CI)."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it when services are required."""
    message = f"no Kafka broker for this test: {reason}"
    if services_required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


def start_local_broker(
    home: Path, timeout: float = START_TIMEOUT_S, tried: Sequence[str] = ()
) -> LocalBroker:
    """A started :class:`LocalBroker` in ``home`` on free ports, or skip/fail the test.

    ``tried`` lists why other broker sources were passed over, for the skip/fail message.
    """
    last: BrokerError | None = None
    settings = Settings()
    for _ in range(2):  # a free port can be taken between picking and binding: retry once
        port, controller_port = free_ports(2)
        broker = LocalBroker(
            home=home,
            port=port,
            controller_port=controller_port,
            cache_dir=settings.kafka_cache_dir,
            jvm_options=settings.kafka_jvm_options.split(),
        )
        try:
            broker.start(timeout=timeout)
        except BrokerError as exc:
            last = exc
            if "already in use" not in str(exc):
                break
        else:
            return broker
    unavailable("; ".join([*tried, f"the local broker did not start: {last}"]))


#: heap of each node of a test cluster: three of them share the machine with the services
CLUSTER_HEAP = "384m"


def start_local_cluster(
    home: Path, brokers: int = 3, timeout: float = START_TIMEOUT_S
) -> LocalCluster:
    """A started :class:`LocalCluster` of ``brokers`` nodes in ``home`` on free ports, or
    skip/fail the test."""
    last: BrokerError | None = None
    settings = Settings()
    for attempt in range(2):  # a free port can be taken between picking and binding: retry
        ports = free_ports(2 * brokers)
        cluster = LocalCluster(
            home=home / f"try-{attempt}",
            ports=[(ports[2 * i], ports[2 * i + 1]) for i in range(brokers)],
            cache_dir=settings.kafka_cache_dir,
            heap=CLUSTER_HEAP,
            jvm_options=settings.kafka_jvm_options.split(),
        )
        try:
            cluster.start(timeout=timeout)
        except BrokerError as exc:
            last = exc
            if "already in use" not in str(exc):
                break
        else:
            return cluster
    unavailable(f"the local {brokers}-broker cluster did not start: {last}")


def _docker_answers() -> bool:
    try:
        docker: Any = importlib.import_module("docker")
        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextlib.contextmanager
def _testcontainers_kafka(reasons: list[str]) -> Iterator[str | None]:
    """Bootstrap address of a Kafka container, or None (with the reason appended)."""
    try:
        module: Any = importlib.import_module("testcontainers.kafka")
    except ImportError:
        reasons.append("testcontainers is not installed")
        yield None
        return
    if not _docker_answers():
        reasons.append("no Docker engine answers")
        yield None
        return
    image = os.environ.get(IMAGE_ENV)
    container = module.KafkaContainer(image) if image else module.KafkaContainer()
    try:
        container.start()
    except Exception as exc:
        reasons.append(f"the Kafka container did not start: {exc}")
        yield None
        return
    try:
        yield str(container.get_bootstrap_server())
    finally:
        container.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Kafka broker shared by the whole test session."""
    given = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if given:
        yield given
        return
    source = os.environ.get(SOURCE_ENV, "auto").strip().lower()
    reasons: list[str] = []
    if source in ("auto", "docker"):
        with _testcontainers_kafka(reasons) as bootstrap:
            if bootstrap is not None:
                yield bootstrap
                return
        if source == "docker":
            unavailable("; ".join(reasons))
    root = _run_root(tmp_path_factory)
    if root is not None:
        yield _shared_local_broker(root, reasons)
        return
    broker = start_local_broker(tmp_path_factory.mktemp("kafka"), tried=reasons)
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


#: the shared broker's record in the run's root folder: its bootstrap address, home and ports
SHARED_STATE = "shared-kafka.json"


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder every worker of a pytest-xdist run shares (the controller's basetemp), or None
    outside xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent


def _shared_local_broker(root: Path, reasons: list[str]) -> str:
    """The run's shared broker: started by the first worker that asks, under a lock."""
    state = root / SHARED_STATE
    with (root / "shared-kafka.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the first one's start
        if state.exists():
            return str(json.loads(state.read_text())["bootstrap"])
        broker = start_local_broker(root / "shared-kafka", tried=reasons)
        record = {
            "bootstrap": broker.bootstrap_servers,
            "home": str(broker.home),
            "port": broker.port,
            "controller_port": broker.controller_port,
        }
        state.write_text(json.dumps(record))
        return broker.bootstrap_servers


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller of an xdist run stops the shared broker, once every worker is done."""
    if hasattr(session.config, "workerinput") or not getattr(
        session.config.option, "numprocesses", None
    ):
        return  # a worker, or a run without workers (its broker stopped with its fixture)
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    state = factory.getbasetemp() / SHARED_STATE
    if not state.exists():
        return
    record = json.loads(state.read_text())
    LocalBroker(
        home=Path(record["home"]),
        port=int(record["port"]),
        controller_port=int(record["controller_port"]),
        cache_dir=Settings().kafka_cache_dir,
    ).stop()
    state.unlink()


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """An AdminClient on the session's broker."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


class TopicFactory(Protocol):
    """Creates a uniquely named, ready topic and returns its name."""

    def __call__(
        self,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        prefix: str | None = None,
    ) -> str: ...


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:80] or "topic"


@pytest.fixture
def kafka_topic_factory(
    request: pytest.FixtureRequest, kafka_admin: AdminClient
) -> Iterator[TopicFactory]:
    """Make topics named after the test (plus a random suffix); deleted after the test."""
    created: list[str] = []

    def make(
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        prefix: str | None = None,
    ) -> str:
        name = f"{_slug(prefix or request.node.name)}-{uuid.uuid4().hex[:8]}"
        topic = NewTopic(name, num_partitions=partitions, config=dict(config or {}))
        futures = kafka_admin.create_topics([topic], operation_timeout=30, request_timeout=30)
        futures[name].result(timeout=30)
        created.append(name)
        wait_for_topics(kafka_admin, [name], timeout=30)
        return name

    yield make
    try:
        delete_topics(kafka_admin, created)
    except TopicsError as exc:
        warnings.warn(f"test topics left behind: {exc}", stacklevel=1)


@pytest.fixture
def restartable_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A started broker of this test's own, in ``tmp_path/"kafka"``, that it may stop and start.

    ``tmp_path`` works as a ``--state-dir`` for the ``runtrail kafka`` commands. The broker is
    stopped after the test, whatever state the test left it in.
    """
    broker = start_local_broker(tmp_path / "kafka")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def restartable_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A started three-broker cluster of this test's own (``tmp_path/"kafka"``), whose nodes
    it may kill, stop and start; stopped after the test, whatever state it was left in."""
    cluster = start_local_cluster(tmp_path / "kafka")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A three-broker cluster shared by the tests of one file, none of which stops a node
    (mark them ``kafka``: the fixture is no shared broker the tiers know by name)."""
    cluster = start_local_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()
