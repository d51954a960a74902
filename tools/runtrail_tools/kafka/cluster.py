"""A local KRaft cluster of several nodes from the same jars as the single broker.

Every node runs broker and controller in one JVM (combined mode) and is a voter of the
controller quorum: three JVMs rather than six on a developer's machine, and a quorum of three
still elects a controller with any one node down, which is what a broker kill or a rolling
restart takes. (Production separates the roles; docs/OPERATIONS.md says why.)

The cluster lives in one folder: ``cluster.json`` (its id, ports and quorum, chosen once: the
nodes' storage is formatted with that quorum) and ``node-N/``, each a :class:`LocalBroker` home.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from runtrail.kafka.errors import BrokerError
from runtrail_tools.kafka.broker import BrokerState, LocalBroker, Quorum, new_cluster_id

if TYPE_CHECKING:
    from runtrail.config import Settings

__all__ = ["ClusterLayout", "LocalCluster", "cluster_ports"]

LAYOUT_FILE = "cluster.json"


def cluster_ports(port: int, controller_port: int, brokers: int) -> list[tuple[int, int]]:
    """Each node's (broker port, controller port): the given pair, then two higher each."""
    return [(port + 2 * i, controller_port + 2 * i) for i in range(brokers)]


@dataclass(frozen=True)
class ClusterLayout:
    """What ``cluster.json`` records: the quorum and each node's ports."""

    quorum: Quorum
    ports: tuple[tuple[int, int], ...]

    @classmethod
    def new(cls, ports: Sequence[tuple[int, int]]) -> ClusterLayout:
        voters = tuple(
            (node, controller, new_cluster_id())
            for node, (_, controller) in enumerate(ports, start=1)
        )
        return cls(Quorum(new_cluster_id(), voters), tuple((b, c) for b, c in ports))

    @classmethod
    def load(cls, path: Path) -> ClusterLayout | None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            voters = tuple((int(n), int(p), str(d)) for n, p, d in raw["voters"])
            ports = tuple((int(b), int(c)) for b, c in raw["ports"])
            return cls(Quorum(str(raw["cluster_id"]), voters), ports)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, path: Path) -> None:
        data = {
            "cluster_id": self.quorum.cluster_id,
            "voters": [list(v) for v in self.quorum.voters],
            "ports": [list(p) for p in self.ports],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)


class LocalCluster:
    """Several :class:`LocalBroker` nodes forming one KRaft cluster on 127.0.0.1.

    The layout of an existing ``cluster.json`` wins over the ports given: the nodes' storage
    was formatted with its quorum."""

    def __init__(
        self,
        home: Path,
        ports: Sequence[tuple[int, int]],
        cache_dir: Path,
        heap: str = "512m",
        kafka_home: Path | None = None,
        jvm_options: Sequence[str] = (),
    ) -> None:
        self.home = Path(home).expanduser().resolve()
        found = ClusterLayout.load(self.layout_file)
        if found is not None and len(found.ports) != len(ports):
            raise BrokerError(
                f"the cluster in {self.home} has {len(found.ports)} nodes, not {len(ports)}; "
                "stop it and remove that folder to change its size"
            )
        if len(ports) < 2:
            raise BrokerError("a local cluster has two nodes or more (one is LocalBroker)")
        self.layout = found or ClusterLayout.new(ports)
        self.nodes = [
            LocalBroker(
                home=self.home / f"node-{node}",
                port=port,
                controller_port=controller,
                cache_dir=cache_dir,
                heap=heap,
                kafka_home=kafka_home,
                node_id=node,
                jvm_options=jvm_options,
                quorum=self.layout.quorum,
            )
            for node, (port, controller) in enumerate(self.layout.ports, start=1)
        ]

    @classmethod
    def of_settings(
        cls,
        settings: Settings,
        brokers: int,
        *,
        port: int | None = None,
        controller_port: int | None = None,
    ) -> LocalCluster:
        """The cluster of ``settings.state_dir`` (in ``kafka/``, where a single broker would
        be), its nodes on the given ports or the settings', then two higher each."""
        return cls(
            home=settings.state_dir / "kafka",
            ports=cluster_ports(
                port or settings.kafka_port,
                controller_port or settings.kafka_controller_port,
                brokers,
            ),
            cache_dir=settings.kafka_cache_dir,
            heap=settings.kafka_heap,
            jvm_options=settings.kafka_jvm_options.split(),
        )

    @staticmethod
    def exists_in(home: Path) -> bool:
        """Whether ``home`` holds a cluster (rather than a single broker, or nothing)."""
        return (Path(home).expanduser() / LAYOUT_FILE).is_file()

    @property
    def layout_file(self) -> Path:
        return self.home / LAYOUT_FILE

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes)

    @property
    def server_log(self) -> Path:
        """The first node's log (each node has its own, in ``node-N/logs``)."""
        return self.nodes[0].server_log

    @property
    def pid(self) -> int | None:
        """The pid of the first node that runs, else None."""
        return next((pid for pid in (n.pid for n in self.nodes) if pid is not None), None)

    def pids(self) -> list[int | None]:
        return [node.pid for node in self.nodes]

    def is_running(self) -> bool:
        """Whether every node runs (:meth:`start` starts those that do not)."""
        return all(node.is_running() for node in self.nodes)

    def read_state(self) -> BrokerState | None:
        """The first running node's state, with the whole cluster's bootstrap address."""
        for node in self.nodes:
            state = node.read_state()
            if state is not None and node.is_running():
                return BrokerState(
                    **{**state.__dict__, "bootstrap_servers": self.bootstrap_servers}
                )
        return None

    def ensure_jars(self) -> Path:
        return self.nodes[0].ensure_jars()

    def start(self, timeout: float = 90.0) -> None:
        """Start every node that is not running, then wait until each answers (a node answers
        only once a majority of the quorum runs, so all are launched first)."""
        self.layout.save(self.layout_file)
        for node in self.nodes:
            node.ensure_jars()
            node.launch()
        try:
            for node in self.nodes:
                node.wait_ready(timeout)
        except BrokerError:
            self.stop(timeout=10)
            raise

    def stop(self, timeout: float = 20.0) -> None:
        """Stop every node at once (a clean shutdown each, SIGKILL after ``timeout``);
        idempotent. At once: the last node stopped alone would wait for a quorum that is gone."""
        problems: list[str] = []

        def stop(node: LocalBroker) -> None:
            try:
                node.stop(timeout)
            except BrokerError as exc:
                problems.append(str(exc))

        threads = [threading.Thread(target=stop, args=(node,)) for node in self.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if problems:
            raise BrokerError("; ".join(problems))

    def __repr__(self) -> str:
        return f"LocalCluster(home={str(self.home)!r}, bootstrap={self.bootstrap_servers!r})"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


#: the local Kafka of a state folder: one broker, or a cluster of several
LocalKafka = LocalBroker | LocalCluster


def local_kafka(
    settings: Settings,
    brokers: int | None = None,
    *,
    port: int | None = None,
    controller_port: int | None = None,
) -> LocalKafka:
    """The local Kafka of ``settings.state_dir`` (``runtrail kafka`` and ``runtrail dev``
    manage the same one): ``brokers`` nodes, or when None, whatever the folder holds."""
    home = settings.state_dir / "kafka"
    if brokers is None:
        brokers = len(found.ports) if (found := ClusterLayout.load(home / LAYOUT_FILE)) else 1
    if brokers > 1:
        single = LocalBroker.of_settings(settings)
        if single.is_running():
            raise BrokerError(
                f"a single broker runs in {single.home}; stop it first (runtrail kafka down)"
            )
        return LocalCluster.of_settings(
            settings, brokers, port=port, controller_port=controller_port
        )
    if LocalCluster.exists_in(home) and brokers == 1:
        cluster = LocalCluster.of_settings(settings, len(_layout_ports(home)))
        if cluster.is_running():
            raise BrokerError(
                f"a cluster of {len(cluster.nodes)} brokers runs in {home}; stop it first "
                "(runtrail kafka down)"
            )
    return LocalBroker.of_settings(settings, port=port, controller_port=controller_port)


def _layout_ports(home: Path) -> tuple[tuple[int, int], ...]:
    found = ClusterLayout.load(home / LAYOUT_FILE)
    return found.ports if found is not None else ()
