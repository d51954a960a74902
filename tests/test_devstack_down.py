"""``dev down`` and ``dev status`` take every flag of ``dev up``, and ``dev down`` stops what
``dev up`` started from what it recorded, whatever flags it is given (issue 26: ``dev down
--port-base …`` exited 2 and stopped nothing, leaving every service running).

The stack is as small as a real one gets: its own broker on free ports away from the
defaults, the noop service, no run explorer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail_tools.cli.main import build_parser
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.ports import free_ports, port_accepts, port_bindable
from runtrail_tools.pids import pid_alive
from tests.kafka_fixture import unavailable
from tests.test_devstack_e2e import processes_of

#: what would make ``dev down`` find the broker without reading the state folder
PORT_VARIABLES = ("RUNTRAIL_KAFKA_PORT", "RUNTRAIL_KAFKA_CONTROLLER_PORT")


def options_of(*command: str) -> set[str]:
    parser: argparse.ArgumentParser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return {o for action in parser._actions for o in action.option_strings}


def test_down_and_status_take_every_flag_of_up() -> None:
    up = options_of("dev", "up")
    assert {"--port-base", "--kafka-port", "--kafka-controller-port"} <= up
    assert up - options_of("dev", "down") == set()
    assert up - options_of("dev", "status") == set()


def runtrail(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RUNTRAIL_DEV") and k not in PORT_VARIABLES
    }
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def up_on_free_ports(tmp_path: Path) -> tuple[Path, list[str], subprocess.CompletedProcess[str]]:
    """``dev up`` of the small stack on free ports: its state folder, its flags, its result.
    A port picked free can be taken before the broker binds it (other tests pick ports too):
    then once more on other ports, in a fresh folder, as ``tests/kafka_fixture.py`` does."""
    for attempt in range(2):
        state_dir = (tmp_path / f"state-{attempt}").resolve()
        kafka_port, controller_port = free_ports(2)
        flags = [
            "--state-dir", str(state_dir), "--port-base", str(find_free_base(["noop"])),
            "--kafka-port", str(kafka_port), "--kafka-controller-port", str(controller_port),
            "--service", "noop", "--no-ui",
        ]  # fmt: skip
        up = runtrail("dev", "up", *flags)
        if up.returncode == 0 or attempt or "already in use" not in up.stdout + up.stderr:
            break
        runtrail("dev", "down", "--state-dir", str(state_dir))  # whatever the attempt left
    return state_dir, flags, up


@pytest.mark.kafka
def test_down_with_no_port_flag_stops_a_stack_started_on_other_ports(tmp_path: Path) -> None:
    try:
        LocalBroker(tmp_path / "jars", 1, 2, cache_dir=Settings().kafka_cache_dir).ensure_jars()
    except BrokerError as exc:
        unavailable(f"no broker jars: {exc}")
    state_dir, flags, up = up_on_free_ports(tmp_path)
    kafka_port = int(flags[flags.index("--kafka-port") + 1])
    controller_port = int(flags[flags.index("--kafka-controller-port") + 1])
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        recorded = json.loads((state_dir / "dev" / "stack.json").read_text())
        noop = recorded["services"]["noop"]
        broker_pid = int((state_dir / "kafka" / "broker.pid").read_text())
        pids = [noop["pid"], broker_pid]
        ports = [noop["metrics_port"], kafka_port, controller_port]
        assert all(pid_alive(p) for p in pids) and all(port_accepts(p) for p in ports)
        # a script passes status the flags it gave up
        status = runtrail("dev", "status", *flags)
        assert status.returncode == 0, status.stdout + status.stderr
        assert str(noop["pid"]) in status.stdout
    finally:
        # no port flag: the ports are the recorded ones, not the defaults
        down = runtrail("dev", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"kafka: stopped (pid {broker_pid})" in down.stdout
    assert not any(pid_alive(p) for p in pids)
    assert processes_of(state_dir) == []
    assert all(port_bindable(p) for p in ports), [p for p in ports if not port_bindable(p)]
    assert not (state_dir / "dev" / "stack.json").exists()
    assert not (state_dir / "kafka" / "broker.pid").exists()
