"""``DevStack``: start, inspect and stop the local stack (broker, topics, services, receivers,
the ui, Prometheus).

The receivers it runs (:data:`STACK_RECEIVERS`: the command API and its outbox relay) start
like the services, through ``runtrail run``, but join no consumer group.

``up`` is idempotent: what already runs is kept, what is missing is started. Every process is
recorded in ``stack.json`` as soon as it is spawned, so a failed ``up`` is still cleaned by
``down``. ``down`` stops the services first (SIGTERM: each drains, flushes and commits; SIGKILL
after a bound), then Prometheus, then the broker, and checks that no recorded port still
accepts connections.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from runtrail.config import Settings
from runtrail.files import open_private, private_dir
from runtrail.kafka.admin import admin_client
from runtrail.kafka.topics import TopicsError, ensure_design_topics
from runtrail.runtime.registry import SERVICES
from runtrail_tools.demo.replay_model import FACTORY as REPLAY_MODEL
from runtrail_tools.devstack import procs
from runtrail_tools.devstack import prometheus as prom
from runtrail_tools.devstack.ports import (
    DEFAULT_BASE,
    DEFAULT_PROMETHEUS_PORT,
    PortPlan,
    plan_ports,
)
from runtrail_tools.devstack.scrape import ready
from runtrail_tools.devstack.service_settings import (
    DEV_TUNING,
    STACK_RECEIVERS,
    importable,
    is_receiver,
    settings_info,
)
from runtrail_tools.devstack.state import ProcessRecord, StackState
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.cluster import LocalCluster, LocalKafka, local_kafka
from runtrail_tools.kafka.ports import port_accepts, port_bindable, wait_port_closed
from runtrail_tools.pids import pid_alive

#: Runtime settings the stack lowers for quick feedback unless the environment sets them.
DEV_RUNTIME_ENV: dict[str, str] = {
    "RUNTRAIL_COMMIT_INTERVAL_MS": "500",
    "RUNTRAIL_BATCH_TIMEOUT_MS": "100",
}
DEMO_TENANTS: tuple[str, ...] = ("acme", "globex")


def stack_names() -> list[str]:
    """What ``up`` runs by default, in port-table order: the services, then the receivers."""
    return [*SERVICES, *STACK_RECEIVERS]


class StackError(RuntimeError):
    """The stack could not be brought up (or down) as asked."""


@dataclass(frozen=True)
class StackOptions:
    """How ``up`` runs the stack; ``down``/``status`` read what ``up`` recorded instead."""

    port_base: int = DEFAULT_BASE
    #: Services to run (None: every registered service whose code imports, and the
    #: receivers of :data:`STACK_RECEIVERS`).
    services: Sequence[str] | None = None
    group_prefix: str = "runtrail"
    #: Start (and later stop) the local broker; False uses ``settings.bootstrap_servers``.
    manage_broker: bool = True
    prometheus: bool = False
    prometheus_port: int = DEFAULT_PROMETHEUS_PORT
    #: Start the run explorer (``runtrail ui``) on ``base + UI_OFFSET``.
    ui: bool = True
    scrape_interval: str = "5s"
    tenants: Sequence[str] = DEMO_TENANTS
    ready_timeout: float = 120.0
    stop_timeout: float = 20.0
    broker_timeout: float = 120.0
    #: Nodes of the local Kafka (None: what the state folder holds, one broker when nothing).
    brokers: int | None = None


@dataclass
class Selection:
    """The services ``up`` will run, and those it leaves out with the reason."""

    run: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class DevStack:
    """The local stack of one state folder."""

    def __init__(
        self,
        settings: Settings,
        options: StackOptions | None = None,
        *,
        say: Callable[[str], None] = print,
    ) -> None:
        self.state_dir = settings.state_dir.expanduser().resolve()
        self.settings = settings.model_copy(update={"state_dir": self.state_dir})
        self.options = options or StackOptions()
        self.say = say
        #: the processes this object spawned, by pid: whether they still run is their
        #: handle's answer (see :func:`procs.spawn`), not their command line's
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # --- layout ---------------------------------------------------------------------------
    @property
    def dev_dir(self) -> Path:
        return self.state_dir / "dev"

    def log_path(self, name: str) -> Path:
        return self.dev_dir / "logs" / f"{name}.log"

    def pid_path(self, name: str) -> Path:
        return self.dev_dir / f"{name}.pid"

    def broker(self, *, recorded: bool = False) -> LocalKafka:
        """The local broker or cluster of this state folder (the same one ``runtrail kafka``
        manages), on the settings' ports, or with ``recorded`` on those its state file says it
        was started with (``down`` stops the broker ``up`` started, whatever ports it is
        given; a cluster keeps the ports of its layout file)."""
        broker = local_kafka(self.settings, self.options.brokers)
        if isinstance(broker, LocalCluster):
            return broker
        found = broker.read_state() if recorded else None
        if found is None:
            return broker
        return LocalBroker.of_settings(
            self.settings, port=found.port, controller_port=found.controller_port
        )

    def service_marker(self, name: str) -> list[str]:
        """argv items that identify this stack's process of ``name`` (pid reuse guard)."""
        return ["runtrail_tools.cli.main", "run", name, "--state-dir", str(self.state_dir)]

    def ui_marker(self) -> list[str]:
        return ["runtrail_tools.cli.main", "ui", "--state-dir", str(self.state_dir)]

    def prometheus_marker(self) -> list[str]:
        return [f"--storage.tsdb.path={self.dev_dir / 'prometheus' / 'data'}"]

    def load_state(self) -> StackState | None:
        return StackState.load(self.state_dir)

    # --- selection ------------------------------------------------------------------------
    def select(self) -> Selection:
        """Registered services (and receivers) to run; a registered one whose code does not
        import (still being built, or its extra is missing) is skipped, not fatal."""
        known_names = stack_names()
        wanted = list(self.options.services) if self.options.services else known_names
        selection = Selection()
        for name in wanted:
            if name not in known_names:
                known = ", ".join(known_names)
                raise StackError(f"unknown service {name!r} (registered: {known})")
            if importable(name):
                selection.run.append(name)
            else:
                selection.skipped[name] = "registered, but its code does not import yet"
        return selection

    def plan(self, services: Sequence[str]) -> PortPlan:
        with_api = [name for name in services if settings_info(name).has("http_port")]
        ordered = [name for name in stack_names() if name in services]
        return plan_ports(ordered, self.options.port_base, with_api)

    # --- up -------------------------------------------------------------------------------
    def up(self) -> StackState:
        private_dir(self.dev_dir / "logs")  # state, logs and pids are the owner's alone
        selection = self.select()
        for name, why in selection.skipped.items():
            self.say(f"  skipping {name}: {why}")
        plan = self.plan(selection.run)
        previous = self.load_state()
        bootstrap, broker_kind = self._broker_up()
        settings = self.settings.model_copy(update={"bootstrap_servers": bootstrap})
        self._topics(settings)
        state = StackState(
            state_dir=str(self.state_dir),
            bootstrap_servers=bootstrap,
            events_topic=settings.events_topic,
            dlq_topic=settings.dlq_topic,
            broker=broker_kind,
            port_base=plan.base,
            agent_port=plan.agent,
            tokens_file=str(self._tokens_file()),
            env=self._common_env(settings),
        )
        # every process of an earlier ``up`` that still runs stays recorded (even if not
        # selected this time), so ``down`` never leaves one behind
        state.services.update(self._still_running(previous))
        kept_ui = previous.ui if previous is not None else None
        if kept_ui is not None and procs.runs(kept_ui.pid, self.ui_marker()):
            state.ui = kept_ui
            self.say(f"  ui already running (pid {kept_ui.pid}, {state.ui_url})")
        self._check_ports(plan, state)
        state.save()
        for name in selection.run:
            if name in state.services:
                self.say(f"  {name} already running (pid {state.services[name].pid})")
                continue
            state.services[name] = self._spawn_service(name, plan, state)
            state.save()
        self._wait_ready(state)
        if self.options.ui and state.ui is None:
            state.ui = self._ui_up(state, plan)
            state.save()
        if self.options.prometheus:
            state.prometheus = self._prometheus_up(state, previous)
            state.save()
        return state

    def _broker_up(self) -> tuple[str, str]:
        if not self.options.manage_broker:
            return self.settings.bootstrap_servers, "external"
        try:
            broker = self.broker()
        except BrokerError as exc:
            raise StackError(f"kafka did not start: {exc}") from exc
        if broker.is_running():
            found = broker.read_state()
            address = found.bootstrap_servers if found else broker.bootstrap_servers
            self.say(f"  kafka already running at {address} (pid {broker.pid})")
            return address, "local"
        self.say(f"  starting kafka on {broker.bootstrap_servers} (home {broker.home})")
        try:
            broker.start(timeout=self.options.broker_timeout)
        except BrokerError as exc:
            raise StackError(f"kafka did not start: {exc}") from exc
        self.say(f"  kafka running at {broker.bootstrap_servers} (pid {broker.pid})")
        return broker.bootstrap_servers, "local"

    def _topics(self, settings: Settings) -> None:
        admin = admin_client(settings.kafka_config())
        try:
            report = ensure_design_topics(admin, settings, timeout=30.0)
        except TopicsError as exc:
            raise StackError(f"topics on {settings.bootstrap_servers}: {exc}") from exc
        created = [o.name for o in report.outcomes if o.status == "created"]
        differ = [o.name for o in report.outcomes if o.status == "differs"]
        self.say(
            f"  topics: {len(report.outcomes)} ensured, created {', '.join(created) or 'none'}"
        )
        if differ:
            self.say(f"  warning: topics differ from the design (left as they are): {differ}")

    def _tokens_file(self) -> Path:
        """Bearer tokens per demo tenant for the services' APIs (made once, owner-only)."""
        path = self.dev_dir / "tokens.json"
        tokens: dict[str, str] = {}
        if path.exists():
            tokens = json.loads(path.read_text(encoding="utf-8"))
        missing = [t for t in (*self.options.tenants, self.settings.tenant) if t not in tokens]
        if missing or not path.exists():
            tokens.update({t: f"dev-{t}-{secrets.token_hex(8)}" for t in missing})
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(tokens, out, indent=2)
        return path

    def _common_env(self, settings: Settings) -> dict[str, str]:
        """What every service process is told (the stack's topics, broker and state)."""
        env = {
            "RUNTRAIL_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "RUNTRAIL_EVENTS_TOPIC": settings.events_topic,
            "RUNTRAIL_DLQ_TOPIC": settings.dlq_topic,
            "RUNTRAIL_RESUME_CACHE_TOPIC": settings.resume_cache_topic,
            "RUNTRAIL_SESSIONS_TOPIC": settings.sessions_topic,
            "RUNTRAIL_AUDIT_TOPIC": settings.audit_topic,
            "RUNTRAIL_OTLP_RAW_TOPIC": settings.otlp_raw_topic,
            "RUNTRAIL_PARTITIONS": str(settings.partitions),
            "RUNTRAIL_STATE_DIR": str(self.state_dir),
            "RUNTRAIL_KAFKA_OPTIONS": json.dumps(settings.kafka_options),
            "RUNTRAIL_KAFKA_OPTION_FILES": json.dumps(
                {k: str(v) for k, v in settings.kafka_option_files.items()}
            ),
            "RUNTRAIL_METRICS_HOST": "127.0.0.1",
        }
        for key, value in DEV_RUNTIME_ENV.items():
            env[key] = os.environ.get(key, value)
        return env

    def service_env(self, name: str, plan: PortPlan, state: StackState) -> dict[str, str]:
        """The service's own settings for the stack: API port, tokens, dev tuning — each only
        if its settings class has the field, and tuning only where the user set nothing."""
        info = settings_info(name)
        own: dict[str, object] = {}
        if name in plan.api:
            own["http_port"] = plan.api[name]
        tokens_path = Path(state.tokens_file) if state.tokens_file else None
        if tokens_path is not None:
            if info.has("tokens_file"):
                own["tokens_file"] = tokens_path
            if info.has("http_tokens"):
                own["http_tokens"] = tokens_path.read_text(encoding="utf-8").strip()
        if info.has("transactional_id") and info.env_name("transactional_id") not in os.environ:
            # one relay per store: another stack's relay on the same broker must not fence it
            own["transactional_id"] = f"{self.options.group_prefix}.{name}"
        env = info.env(own)
        for key, value in DEV_TUNING.get(name, {}).items():
            var = info.env_name(key)
            if info.has(key) and var not in os.environ:
                env[var] = value
        return env

    def _still_running(self, previous: StackState | None) -> dict[str, ProcessRecord]:
        if previous is None:
            return {}
        return {
            name: record
            for name, record in previous.services.items()
            if procs.runs(record.pid, self.service_marker(name))
        }

    def _check_ports(self, plan: PortPlan, state: StackState) -> None:
        ours = set(state.all_ports())
        busy = [
            f"{name}:{port}"
            for name in plan.metrics
            if name not in state.services
            for port in (plan.metrics[name], plan.api.get(name))
            if port is not None and port not in ours and not port_bindable(port)
        ]
        if busy:
            raise StackError(
                f"ports already in use: {', '.join(busy)}; stop what holds them, or move the "
                "whole table with --port-base"
            )

    def _spawn_service(self, name: str, plan: PortPlan, state: StackState) -> ProcessRecord:
        group = None if is_receiver(name) else f"{self.options.group_prefix}.{name}"
        argv = [
            sys.executable,
            "-m",
            *self.service_marker(name),
            "--metrics-port",
            str(plan.metrics[name]),
            *(["--group", group] if group else []),
            "-v",
        ]
        env = {**os.environ, **state.env, **self.service_env(name, plan, state)}
        env["PYTHONUNBUFFERED"] = "1"
        log = self.log_path(name)
        pid = self._spawn(argv, env=env, log_path=log, cwd=self.state_dir)
        with open_private(self.pid_path(name), "w", encoding="ascii") as out:
            out.write(f"{pid}\n")
        self.say(f"  started {name} (pid {pid}, metrics :{plan.metrics[name]}, log {log})")
        return ProcessRecord(
            name=name,
            pid=pid,
            metrics_port=plan.metrics[name],
            group=group,
            api_port=plan.api.get(name),
            log=str(log),
            started_at=_now(),
        )

    def _spawn(self, argv: Sequence[str], *, env: dict[str, str], log_path: Path, cwd: Path) -> int:
        child = procs.spawn(argv, env=env, log_path=log_path, cwd=cwd)
        self._children[child.pid] = child
        return child.pid

    def _service_runs(self, name: str, record: ProcessRecord) -> bool:
        """A service this object spawned runs while its handle has no exit status (its argv
        may not show the command yet: it may not have finished its exec); one an earlier
        ``up`` started must still run its command line (pid reuse)."""
        child = self._children.get(record.pid)
        if child is not None:
            return child.poll() is None
        return procs.runs(record.pid, self.service_marker(name))

    def _wait_ready(self, state: StackState) -> None:
        """Every service answers /readyz (joined its group, has partitions), or fail with the
        log of the one that exited or never got ready."""
        pending = dict(state.services)
        deadline = time.monotonic() + self.options.ready_timeout
        while pending:
            for name, record in list(pending.items()):
                if not self._service_runs(name, record):
                    raise StackError(
                        f"{name} (pid {record.pid}) exited while starting; last lines of "
                        f"{record.log}:\n{_tail(Path(record.log))}"
                    )
                if ready(record.metrics_port):
                    del pending[name]
            if pending and time.monotonic() >= deadline:
                name, record = next(iter(pending.items()))
                raise StackError(
                    f"{', '.join(pending)} not ready after {self.options.ready_timeout:.0f}s; "
                    f"last lines of {record.log}:\n{_tail(Path(record.log))}"
                )
            time.sleep(0.25)

    def _ui_up(self, state: StackState, plan: PortPlan) -> ProcessRecord:
        """The run explorer on the stack's stores, topic and tokens (loopback only)."""
        port = plan.ui
        if not port_bindable(port):
            raise StackError(f"port 127.0.0.1:{port} for the ui is in use (move --port-base)")
        argv = [sys.executable, "-m", *self.ui_marker(), "--host", "127.0.0.1", "--port", str(port)]
        env = {**os.environ, **state.env, "PYTHONUNBUFFERED": "1"}
        if "RUNTRAIL_UI_MODEL_CLIENT" not in env:  # the demo's fake: live replay works offline
            argv += ["--model-client", REPLAY_MODEL]
        if state.tokens_file:
            env["RUNTRAIL_UI_TOKENS_FILE"] = state.tokens_file
        log = self.log_path("ui")
        pid = self._spawn(argv, env=env, log_path=log, cwd=self.state_dir)
        deadline = time.monotonic() + 30
        while not port_accepts(port):
            if not pid_alive(pid) or time.monotonic() >= deadline:
                raise StackError(f"the ui did not start; last lines of {log}:\n{_tail(log)}")
            time.sleep(0.2)
        self.say(f"  started ui (pid {pid}, http://127.0.0.1:{port}/, log {log})")
        return ProcessRecord(name="ui", pid=pid, metrics_port=port, log=str(log), started_at=_now())

    def _prometheus_up(self, state: StackState, previous: StackState | None) -> ProcessRecord:
        if previous is not None and previous.prometheus is not None:
            old = previous.prometheus
            if procs.runs(old.pid, self.prometheus_marker()):
                self.say(f"  prometheus already running (pid {old.pid})")
                return old
        binary = prom.find_prometheus()
        if binary is None:
            raise StackError("--prometheus needs the prometheus binary (Debian: prometheus)")
        port = self.options.prometheus_port
        if not port_bindable(port):
            raise StackError(f"port 127.0.0.1:{port} for prometheus is in use (--prometheus-port)")
        folder = self.dev_dir / "prometheus"
        rules = prom.alert_rules_file()
        config = prom.write_config(
            folder / "prometheus.yml",
            prom.scrape_config(
                {n: f"127.0.0.1:{r.metrics_port}" for n, r in state.services.items()},
                {"demo": f"127.0.0.1:{state.agent_port}"},
                interval=self.options.scrape_interval,
                rule_files=[str(rules)] if rules else [],
                token=self.settings.metrics_token,
            ),
        )
        argv = prom.command(binary, config, folder / "data", port)
        log = self.log_path("prometheus")
        pid = self._spawn(argv, env=dict(os.environ), log_path=log, cwd=folder)
        deadline = time.monotonic() + 30
        while not port_accepts(port):
            if not pid_alive(pid) or time.monotonic() >= deadline:
                raise StackError(f"prometheus did not start; last lines of {log}:\n{_tail(log)}")
            time.sleep(0.2)
        self.say(f"  started prometheus (pid {pid}, http://127.0.0.1:{port})")
        return ProcessRecord(
            name="prometheus", pid=pid, metrics_port=port, log=str(log), started_at=_now()
        )

    # --- down -----------------------------------------------------------------------------
    def down(self, *, keep_broker: bool = False) -> list[str]:
        """Stop everything recorded (and the broker of this state folder if the stack manages
        it); the problems left, if any (a port still open)."""
        state = self.load_state()
        timeout = self.options.stop_timeout
        problems: list[str] = []
        if state is not None:
            for name, record in state.services.items():
                outcome = procs.stop(
                    record.pid, marker=self.service_marker(name), timeout=timeout, name=name
                )
                self.say(f"  {name}: {outcome} (pid {record.pid})")
                self.pid_path(name).unlink(missing_ok=True)
            if state.ui is not None:
                outcome = procs.stop(
                    state.ui.pid, marker=self.ui_marker(), timeout=timeout, name="ui"
                )
                self.say(f"  ui: {outcome} (pid {state.ui.pid})")
            if state.prometheus is not None:
                outcome = procs.stop(
                    state.prometheus.pid,
                    marker=self.prometheus_marker(),
                    timeout=timeout,
                    name="prometheus",
                )
                self.say(f"  prometheus: {outcome} (pid {state.prometheus.pid})")
            for port in state.all_ports():
                if not wait_port_closed(port, timeout=5.0):
                    problems.append(f"port 127.0.0.1:{port} still accepts connections")
        if state is not None:
            manages_broker = state.broker == "local"
        else:
            manages_broker = self.options.manage_broker
        if manages_broker and not keep_broker:
            pid = None
            try:
                broker = self.broker(recorded=True)
                pid = broker.pid
                broker.stop(timeout=timeout)
            except BrokerError as exc:
                problems.append(str(exc))
            self.say(f"  kafka: {f'stopped (pid {pid})' if pid else 'not running'}")
        if state is not None:
            StackState.path_in(self.state_dir).unlink(missing_ok=True)
        return problems

    # --- status ---------------------------------------------------------------------------
    def running(self, state: StackState) -> dict[str, bool]:
        """Per recorded service, whether its process still runs."""
        return {
            name: procs.runs(record.pid, self.service_marker(name))
            for name, record in state.services.items()
        }

    def with_base(self, base: int) -> DevStack:
        return DevStack(self.settings, replace(self.options, port_base=base), say=self.say)
