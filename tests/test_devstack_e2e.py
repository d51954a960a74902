"""``runtrail dev up`` then ``runtrail dev down``, as a user runs them: nothing is left behind.

The stack gets its own broker (on free ports, in a temporary state folder), every registered
service and the receivers (the command API, answering the stack's tenant tokens, and its outbox
relay); after ``down`` no recorded process runs, no process of the state folder exists at all,
and no port of the stack accepts connections.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.procs import cmdline
from runtrail_tools.devstack.service_settings import STACK_RECEIVERS
from runtrail_tools.devstack.stack import stack_names
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.ports import free_ports, port_accepts, port_bindable
from runtrail_tools.pids import pid_alive
from tests.kafka_fixture import unavailable

pytestmark = [pytest.mark.kafka]


def runtrail(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_DEV")},
    )


def processes_of(state_dir: Path) -> list[int]:
    """Every live process whose command line mentions the state folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and pid_alive(int(entry.name)):
            argv = cmdline(int(entry.name)) or []
            if any(str(state_dir) in part for part in argv):
                found.append(int(entry.name))
    return found


def test_dev_up_then_down_leaves_no_process_and_no_port(tmp_path: Path) -> None:
    state_dir = (tmp_path / "state").resolve()
    try:
        LocalBroker(state_dir / "kafka", 1, 2, cache_dir=Settings().kafka_cache_dir).ensure_jars()
    except BrokerError as exc:
        unavailable(f"no broker jars: {exc}")
    kafka_port, controller_port = free_ports(2)
    base = find_free_base(stack_names())
    common = ["--state-dir", str(state_dir)]
    up = runtrail(
        "dev", "up", *common, "--port-base", str(base),
        "--kafka-port", str(kafka_port), "--kafka-controller-port", str(controller_port),
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        stack = json.loads((state_dir / "dev" / "stack.json").read_text())
        services = stack["services"]
        # every registered service and the receivers, each its own process
        assert set(services) == set(stack_names())
        pids = [r["pid"] for r in services.values()]
        assert len(set(pids)) == len(pids) and all(pid_alive(p) for p in pids)
        ports = [p for r in services.values() for p in (r["metrics_port"], r["api_port"]) if p]
        ports += [kafka_port, controller_port]
        assert all(port_accepts(p) for p in ports)
        broker_pid = int((state_dir / "kafka" / "broker.pid").read_text())
        for name, record in services.items():
            assert Path(record["log"]).exists()
            assert int((state_dir / "dev" / f"{name}.pid").read_text()) == record["pid"]

        status = runtrail("dev", "status", *common)
        assert status.returncode == 0, status.stdout + status.stderr
        for name, record in services.items():
            row = next(line for line in status.stdout.splitlines() if line.startswith(f"{name} "))
            group = "-" if name in STACK_RECEIVERS else f"runtrail.{name}"
            assert str(record["pid"]) in row and "ready" in row and f" {group} " in row
            assert f"http://127.0.0.1:{record['metrics_port']}/metrics" in row
            assert (record["group"] is None) == (name in STACK_RECEIVERS)

        # the command API answers the stack's tokens (a run it does not have: 404), no other
        tokens = json.loads(Path(stack["tokens_file"]).read_text())
        url = f"http://127.0.0.1:{services['command-api']['api_port']}"
        assert f"RUNTRAIL_COMMAND_URL={url} " in up.stdout  # `dev up` says where it is
        for token, exit_code, said in ((tokens["acme"], 1, "no run"), ("wrong", 2, "401")):
            shown = runtrail("command", "show", "no-such-run", "--url", url, "--token", token)
            assert shown.returncode == exit_code and said in shown.stderr, shown.stderr
    finally:
        down = runtrail("dev", "down", *common)
    assert down.returncode == 0, down.stdout + down.stderr
    alive = {p: cmdline(p) for p in [*pids, broker_pid] if pid_alive(p)}
    assert not alive, f"alive after `dev down`: {alive}\n{down.stdout}{down.stderr}"
    assert processes_of(state_dir) == []
    assert all(port_bindable(p) for p in ports), [p for p in ports if not port_bindable(p)]
    assert not (state_dir / "dev" / "stack.json").exists()
    again = runtrail("dev", "status", *common)
    assert again.returncode == 3  # no stack recorded
