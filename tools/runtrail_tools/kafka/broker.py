"""A single-node Apache Kafka (KRaft) broker run from Maven-fetched jars, for dev and tests.

Everything lives under one home folder: ``server.properties`` and ``log4j2.yaml`` rendered from
``deploy/kafka``, ``data/`` (formatted once, so a stop and a start keep every topic),
``logs/`` (the broker's log and the JVM's stdout), ``broker.pid`` and ``broker.json``. The JVM
runs detached in its own process group, so it outlives the command that started it and a
later ``stop()`` (from any process) ends it by pid.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from runtrail.config import read_option_files
from runtrail.files import make_private, open_private
from runtrail.kafka.admin import admin_client
from runtrail.kafka.client_log import client_logger
from runtrail.kafka.errors import BrokerError
from runtrail_tools.kafka.class_archive import ClassArchive
from runtrail_tools.kafka.deploy import kafka_deploy_dir, kafka_pom, render_file
from runtrail_tools.kafka.jars import distribution_libs, fetch_jars, find_java
from runtrail_tools.kafka.security import ADMIN_PRINCIPAL, BrokerSecurity, upsert_scram_users

if TYPE_CHECKING:
    from runtrail.config import Settings
from runtrail_tools.kafka.ports import (
    LOOPBACK,
    free_ports,
    port_accepts,
    port_bindable,
    wait_port_closed,
)
from runtrail_tools.pids import pid_alive

__all__ = ["BrokerError", "BrokerState", "LocalBroker", "Quorum"]

log = logging.getLogger(__name__)

_FORMAT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class BrokerState:
    """What ``broker.json`` records about a running broker."""

    pid: int
    bootstrap_servers: str
    port: int
    controller_port: int
    node_id: int
    home: str
    libs: str
    started_at: str
    #: the class-data archive this broker writes at a clean exit, and the name it is kept under
    #: (see ``class_archive``): whoever stops the broker adopts it
    class_archive_written: str | None = None
    class_archive: str | None = None

    @classmethod
    def load(cls, path: Path) -> BrokerState | None:
        """The state in ``path``, or None when it is missing or unreadable."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            optional = {name for name, f in cls.__dataclass_fields__.items() if f.default is None}
            return cls(
                **{
                    name: raw.get(name) if name in optional else raw[name]
                    for name in cls.__dataclass_fields__
                }
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Quorum:
    """The KRaft controller quorum of a several-node local cluster (every node is a voter).

    ``voters`` holds each node's id, controller port and metadata directory id: the storage
    format of every node must name the same voters, so they are chosen once for the cluster."""

    cluster_id: str
    voters: tuple[tuple[int, int, str], ...]

    @property
    def bootstrap(self) -> str:
        """``controller.quorum.bootstrap.servers``: every voter's controller listener."""
        return ",".join(f"{LOOPBACK}:{port}" for _, port, _ in self.voters)

    @property
    def initial_controllers(self) -> str:
        """The storage tool's ``--initial-controllers``: ``id@host:port:directory-id`` each."""
        return ",".join(f"{node}@{LOOPBACK}:{port}:{dir_id}" for node, port, dir_id in self.voters)

    @property
    def replication_factor(self) -> int:
        """Copies of each partition: one per node, at most three."""
        return min(3, len(self.voters))


def new_cluster_id() -> str:
    """A KRaft cluster id: url-safe base64 of 16 random bytes, without padding.

    Like Kafka's ``Uuid.randomUuid`` it never starts with ``-``, which the storage tool's
    argument parser would take for an option (one id in 64 otherwise).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class LocalBroker:
    """One local KRaft broker+controller process bound to 127.0.0.1, owned by a home folder."""

    def __init__(
        self,
        home: Path,
        port: int,
        controller_port: int,
        cache_dir: Path,
        heap: str = "512m",
        kafka_home: Path | None = None,
        node_id: int = 1,
        jvm_options: Sequence[str] = (),
        quorum: Quorum | None = None,
        security: BrokerSecurity | None = None,
    ) -> None:
        """``quorum``: the cluster this node is one voter of; None for a single node, its own
        quorum (formatted ``--standalone``)."""
        if port == controller_port:
            raise BrokerError(f"broker and controller need two ports, both are {port}")
        self.home = Path(home).expanduser().resolve()
        self.port = port
        self.controller_port = controller_port
        self.cache_dir = Path(cache_dir).expanduser()
        self.heap = heap
        self.kafka_home = kafka_home
        self.node_id = node_id
        #: extra JVM options of both the storage format and the broker (not its -Xmx)
        self.jvm_options = tuple(jvm_options)
        self.quorum = quorum
        #: TLS, SASL and ACLs (None: a PLAINTEXT broker that allows everything)
        self.security = security
        self._proc: subprocess.Popen[bytes] | None = None

    # --- layout ---------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def server_log(self) -> Path:
        """The broker's own log (log4j2)."""
        return self.logs_dir / "server.log"

    @property
    def stdout_log(self) -> Path:
        """The JVM's stdout and stderr (crashes before logging starts land here)."""
        return self.logs_dir / "stdout.log"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def state_file(self) -> Path:
        return self.home / "broker.json"

    @classmethod
    def of_settings(
        cls, settings: Settings, *, port: int | None = None, controller_port: int | None = None
    ) -> LocalBroker:
        """The local broker of ``settings.state_dir`` (``runtrail kafka`` and ``runtrail dev``
        manage the same one), on the given ports or the settings'."""
        return cls(
            home=settings.state_dir / "kafka",
            port=port or settings.kafka_port,
            controller_port=controller_port or settings.kafka_controller_port,
            cache_dir=settings.kafka_cache_dir,
            heap=settings.kafka_heap,
            jvm_options=settings.kafka_jvm_options.split(),
        )

    def __repr__(self) -> str:
        return f"LocalBroker(home={str(self.home)!r}, bootstrap={self.bootstrap_servers!r})"

    # --- jars -----------------------------------------------------------------------------

    def ensure_jars(self) -> Path:
        """The folder of broker jars: ``$KAFKA_HOME/libs``, else Maven's cached fetch.

        Also checks that a Java 17+ is there, so a missing toolchain fails here, clearly.
        """
        find_java()
        libs = distribution_libs(self.kafka_home)
        if libs is not None:
            return libs
        return fetch_jars(self.cache_dir, kafka_pom())

    # --- process state --------------------------------------------------------------------

    def read_state(self) -> BrokerState | None:
        """The state file of this home, whether or not the process still runs."""
        return BrokerState.load(self.state_file)

    @property
    def pid(self) -> int | None:
        """Pid of this home's broker process if it is running, else None."""
        if self._proc is not None:
            if self._proc.poll() is None:
                return self._proc.pid
            self._proc = None
        try:
            pid = int(self.pid_file.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None
        if not pid_alive(pid) or not self._is_our_process(pid):
            return None
        return pid

    def _is_our_process(self, pid: int) -> bool:
        """Guards against pid reuse: the process must run this home's config file."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return not Path("/proc/self").exists()  # no procfs: trust the pid file
        except OSError:
            return True
        return str(self.config_file).encode() in cmdline

    def is_running(self) -> bool:
        return self.pid is not None

    # --- start ----------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Start the broker (formatting storage on first use) and wait until it answers.

        A broker of this home that already runs is only waited for. On timeout or early exit
        the process is stopped and the error carries the tail of its logs.
        """
        self.launch()
        try:
            self.wait_ready(timeout)
            if self.security is not None:
                upsert_scram_users(self._admin(), self.security)
        except BrokerError:
            self.stop(timeout=10)
            raise

    def launch(self) -> None:
        """Start the broker process (formatting storage on first use) without waiting for it:
        a node of a cluster answers only once a majority of the quorum runs.

        A broker of this home that already runs is left as it is (ports checked)."""
        if self.is_running():
            state = self.read_state()
            if state is not None and (state.port, state.controller_port) != (
                self.port,
                self.controller_port,
            ):
                raise BrokerError(
                    f"the broker of {self.home} already runs on {state.bootstrap_servers} "
                    f"(controller port {state.controller_port}); stop it first to change ports"
                )
            return
        for port in (self.port, self.controller_port):
            if not port_bindable(port):
                raise BrokerError(
                    f"port {LOOPBACK}:{port} is already in use; choose other ports "
                    "(--kafka-port/--kafka-controller-port or RUNTRAIL_KAFKA_PORT)"
                )
        libs = self.ensure_jars()
        java = find_java()
        for folder in (self.home, self.data_dir, self.logs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        if self.security is not None:
            self.security.ensure()
        log4j = self._render_configs()
        self._format_storage(java, libs)
        self._launch(java, libs, log4j)

    def _render_configs(self) -> Path:
        deploy = kafka_deploy_dir()
        render_file(
            deploy / "server.properties.template",
            self.config_file,
            {
                "NODE_ID": str(self.node_id),
                "PORT": str(self.port),
                "CONTROLLER_PORT": str(self.controller_port),
                "LOG_DIRS": str(self.data_dir),
                **self._quorum_values(),
            },
        )
        if self.security is not None:
            text = self.config_file.read_text(encoding="utf-8")
            with open_private(self.config_file, "w", encoding="utf-8") as out:
                out.write(self.security.secure_properties(text))
            make_private(self.config_file)  # it holds the broker's key password
        return render_file(
            deploy / "log4j2.yaml", self.home / "log4j2.yaml", {"LOG_FILE": str(self.server_log)}
        )

    def _quorum_values(self) -> dict[str, str]:
        """The template's quorum and replication tokens: every internal topic on as many
        copies as there are nodes (at most three), acknowledged by two when there are two."""
        if self.quorum is None:
            return {
                "CONTROLLER_QUORUM": f"{LOOPBACK}:{self.controller_port}",
                "REPLICATION": "1",
                "MIN_ISR": "1",
            }
        replication = self.quorum.replication_factor
        return {
            "CONTROLLER_QUORUM": self.quorum.bootstrap,
            "REPLICATION": str(replication),
            "MIN_ISR": str(min(2, replication)),
        }

    def _format_storage(self, java: str, libs: Path) -> None:
        """Format ``data/`` for KRaft once; later starts reuse it (and keep every topic)."""
        if (self.data_dir / "meta.properties").is_file():
            return
        tool = [
            "kafka.tools.StorageTool",
            "format",
            *(
                ["--standalone", f"--cluster-id={new_cluster_id()}"]
                if self.quorum is None
                else [
                    f"--initial-controllers={self.quorum.initial_controllers}",
                    f"--cluster-id={self.quorum.cluster_id}",
                ]
            ),
            "-c",
            str(self.config_file),
        ]
        secret_args = self.security.format_arguments() if self.security is not None else []
        # the tool's arguments go in a Java argument file when they hold SCRAM passwords
        arg_file = self.home / "format.args"
        if secret_args:
            with open_private(arg_file, "w", encoding="utf-8") as out:
                out.write("\n".join(tool + secret_args) + "\n")
            tool = [f"@{arg_file}"]
        sharing = ClassArchive.of(self.cache_dir, java, libs).reading(self.jvm_options)
        command = [java, "-Xmx256m", *self.jvm_options, *sharing, "-cp", f"{libs}/*", *tool]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=_FORMAT_TIMEOUT_S,
                check=False,
                cwd=self.home,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(f"formatting {self.data_dir} took over {_FORMAT_TIMEOUT_S}s") from exc
        finally:
            arg_file.unlink(missing_ok=True)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()
            raise BrokerError(
                f"formatting {self.data_dir} failed (exit {done.returncode}):\n{output}"
            )
        if self.security is not None:
            self.security.record_mode()

    def _launch(self, java: str, libs: Path, log4j: Path) -> None:
        archive = ClassArchive.of(self.cache_dir, java, libs)
        sharing, written = archive.for_broker(self.jvm_options)
        command = [
            java,
            f"-Xmx{self.heap}",
            *self.jvm_options,
            *sharing,
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={self.logs_dir}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(self.config_file),
        ]
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        with self.stdout_log.open("ab") as out:
            out.write(f"--- runtrail: starting broker at {stamp} ---\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.home,
                start_new_session=True,
            )
        pid = self._proc.pid
        self.pid_file.write_text(f"{pid}\n", encoding="ascii")
        state = BrokerState(
            pid=pid,
            bootstrap_servers=self.bootstrap_servers,
            port=self.port,
            controller_port=self.controller_port,
            node_id=self.node_id,
            home=str(self.home),
            libs=str(libs),
            started_at=stamp,
            class_archive_written=str(written) if written is not None else None,
            class_archive=str(archive.path) if written is not None else None,
        )
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.state_file)
        log.debug("kafka broker pid %d starting on %s", pid, self.bootstrap_servers)

    # --- readiness ------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until an AdminClient sees this broker in the cluster metadata."""
        deadline = time.monotonic() + timeout
        admin: AdminClient | None = None
        while True:
            if not self.is_running():
                raise BrokerError(
                    f"the Kafka broker in {self.home} exited while starting\n{self.log_tail()}"
                )
            if port_accepts(self.port):
                if admin is None:
                    admin = self._admin()
                if self._lists_this_broker(admin):
                    return
            if time.monotonic() >= deadline:
                raise BrokerError(
                    f"the Kafka broker on {self.bootstrap_servers} did not answer within "
                    f"{timeout:.0f}s\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def _admin(self) -> AdminClient:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "socket.connection.setup.timeout.ms": 2000,
            "logger": client_logger(f"{__name__}.probe"),
        }
        if self.security is not None:
            admin = self.security.client(ADMIN_PRINCIPAL)
            config.update(admin.options)
            config.update(read_option_files(admin.option_files))
        return admin_client(config)

    def _lists_this_broker(self, admin: AdminClient) -> bool:
        try:
            metadata = admin.list_topics(timeout=2)
        except KafkaException:
            return False
        return self.node_id in metadata.brokers

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker log and of the JVM's stdout, for error messages."""
        parts = []
        for path, count in ((self.server_log, lines), (self.stdout_log, lines // 2)):
            text = _tail(path, count)
            if text:
                parts.append(f"--- last lines of {path} ---\n{text}")
        return "\n".join(parts) or f"(no broker log yet in {self.logs_dir})"

    # --- stop -----------------------------------------------------------------------------

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the broker (a clean shutdown), SIGKILL it after ``timeout``; idempotent."""
        pid = self.pid
        if pid is not None:
            state = self.read_state()
            port = state.port if state is not None else self.port
            self._signal(pid, signal.SIGTERM)
            clean = self._wait_exit(pid, timeout)
            if not clean:
                log.warning("kafka broker pid %d ignored SIGTERM for %.0fs: killing", pid, timeout)
                self._signal(pid, signal.SIGKILL)
                if not self._wait_exit(pid, 10.0):
                    raise BrokerError(f"kafka broker pid {pid} survived SIGKILL")
            if state is not None and state.class_archive_written and state.class_archive:
                written = Path(state.class_archive_written)
                if clean:
                    ClassArchive(Path(state.class_archive)).adopt(written)
                else:
                    written.unlink(missing_ok=True)
            wait_port_closed(port, timeout=5.0)
        self._proc = None
        self.pid_file.unlink(missing_ok=True)
        self.state_file.unlink(missing_ok=True)

    @staticmethod
    def _signal(pid: int, signum: signal.Signals) -> None:
        """Signal the broker's whole process group (it leads its own), else the pid alone."""
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while pid_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    # --- context manager ------------------------------------------------------------------

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


def prime_class_archive(settings: Settings, libs: Path, timeout: float = 120.0) -> Path | None:
    """Start a broker once in a folder of its own and stop it cleanly, so that the JVM writes
    the class-data archive every later broker start maps (see ``class_archive``); the archive,
    or None when the JVM wrote none (an operator's own sharing options, or a stop that had to
    kill)."""
    archive = ClassArchive.of(settings.kafka_cache_dir, find_java(), libs)
    jvm_options = settings.kafka_jvm_options.split()
    if archive.path.is_file():
        return archive.path
    with tempfile.TemporaryDirectory(prefix="runtrail-class-archive-") as home:
        port, controller_port = free_ports(2)
        broker = LocalBroker(
            Path(home),
            port,
            controller_port,
            cache_dir=settings.kafka_cache_dir,
            heap=settings.kafka_heap,
            jvm_options=jvm_options,
        )
        broker.start(timeout=timeout)
        broker.stop(timeout=timeout)
    return archive.path if archive.path.is_file() else None
