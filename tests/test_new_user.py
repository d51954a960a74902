"""The README's first command, as a new user runs it: a ``git clone`` of HEAD, no venv, no dev
packages, ``./runtrail-demo --stop``.

The script makes its own venv with exactly what it installs (the ``services`` extra, pinned by
the lock), fetches the broker jars, starts the stack, runs the demo and stops everything. It
must exit 0 and print the demo's four runs. The user's machine keeps its caches (pip's, the
broker jars', the compiled path's wheel): they make the run faster, never different.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runtrail_tools.demo.script import SCRIPTS
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import stack_names
from runtrail_tools.kafka.ports import free_ports, port_bindable
from tests.test_demo_e2e import parse_runs

REPO = Path(__file__).resolve().parents[1]
#: what a developer's or CI's shell holds that a new user's does not
DEV_ONLY = ("VIRTUAL_ENV", "PYTHONPATH", "KAFKA_BOOTSTRAP_SERVERS", "PYTEST_ADDOPTS")


def new_user_env() -> dict[str, str]:
    """This machine's environment without the dev venv or any runtrail setting."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in DEV_ONLY and not key.startswith(("RUNTRAIL_", "PYTEST_"))
    }
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def clone_head(into: Path) -> Path:
    """A fresh clone of HEAD: what is committed, nothing else of this checkout."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(into)], check=True, timeout=120)
    return into


@pytest.mark.stack
def test_the_demo_script_works_on_a_clean_clone_with_what_it_installs(tmp_path: Path) -> None:
    clone = clone_head(tmp_path / "runtrail")
    assert not (clone / ".venv").exists()
    kafka_port, controller_port = free_ports(2)
    base = find_free_base(stack_names())
    done = subprocess.run(
        [
            "./runtrail-demo",
            "--stop",
            "--port-base",
            str(base),
            "--kafka-port",
            str(kafka_port),
            "--kafka-controller-port",
            str(controller_port),
            "--state-dir",
            str(tmp_path / "state"),
        ],
        cwd=clone,
        env=new_user_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    runs = parse_runs(done.stdout)
    assert set(runs) == {s.key for s in SCRIPTS}
    # the venv holds the services extra alone: no store driver, no framework came along
    python = clone / ".venv" / "bin" / "python"
    for other in ("psycopg", "obstore", "langchain_core", "opentelemetry.sdk", "agents"):
        probe = subprocess.run(
            [str(python), "-c", f"import {other}"], capture_output=True, timeout=60
        )
        assert probe.returncode != 0, f"{other} is installed by ./runtrail-demo"
    # --stop stopped everything it started
    assert port_bindable(kafka_port) and port_bindable(base)
