"""The lanes and file units of tests/tiers.py reach pytest-xdist: under ``--dist loadgroup``,
the tests of one fault lane run on one worker, one after another, and so do the tests of a
file that share a module fixture.

A synthetic suite (tests that record which worker ran them) is run by a real pytest with real
xdist workers and this project's tiers plugin; it fails if the group suffix is lost between
the plugin, pytest and xdist (as with pytest 9.2 and xdist 3.8, where every test went to any
worker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.tiers import LANES_ENV

ROOT = Path(__file__).resolve().parents[1]
#: the plugins pyproject.toml's addopts turn off (the synthetic suite has no pyproject)
PLUGINS_OFF = ("-p", "no:cloudcoil", "-p", "no:langsmith_plugin")

CONFTEST = """
import pytest

pytest_plugins = ["tests.tiers"]


@pytest.fixture
def restartable_broker():  # the name makes a test a fault test
    return None


@pytest.fixture(scope="module")
def shared():  # a module fixture makes its file one unit
    return None
"""

RECORDER = """
import json, os, time
from pathlib import Path


def record(name):
    time.sleep(0.3)  # long enough for every worker to be handed something
    out = Path(os.environ["LANES_OUT"]) / f"{name}.json"
    out.write_text(json.dumps([os.environ["PYTEST_XDIST_WORKER"], time.monotonic()]))
"""


def _suite(root: Path) -> None:
    (root / "conftest.py").write_text(CONFTEST)
    (root / "recorder.py").write_text(RECORDER)
    for f in range(3):
        body = ["from recorder import record\n"]
        for t in range(3):
            body.append(
                f"def test_fault_{f}_{t}(restartable_broker):\n    record('fault-{f}-{t}')\n"
            )
        (root / f"test_fault_{f}.py").write_text("\n".join(body))
    body = ["from recorder import record\n"]
    for t in range(4):
        body.append(f"def test_shared_{t}(shared):\n    record('shared-{t}')\n")
    (root / "test_shared.py").write_text("\n".join(body))
    body = ["from recorder import record\n"]
    for t in range(6):
        body.append(f"def test_alone_{t}():\n    record('alone-{t}')\n")
    (root / "test_alone.py").write_text("\n".join(body))


def test_fault_lanes_and_shared_files_each_run_on_one_worker(tmp_path: Path) -> None:
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    _suite(suite)
    # the file's last test recorded as its heaviest: a file sharing a fixture still runs in
    # its own order (its tests may build on one another)
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"test_shared.py::test_shared_3": 50.0}))
    env = {
        **os.environ,
        "LANES_OUT": str(out),
        LANES_ENV: "2",
        "RUNTRAIL_TEST_DURATIONS": str(durations),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(suite)]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup",
         "-p", "no:cacheprovider", *PLUGINS_OFF, "--rootdir", str(suite), str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    ran = {name: worker for name, (worker, _) in seen.items()}
    assert len(ran) == 9 + 4 + 6
    fault_workers = {ran[f"fault-{f}-{t}"] for f in range(3) for t in range(3)}
    assert len(fault_workers) <= 2  # two lanes: at most two workers ever ran a fault test
    assert len({ran[f"shared-{t}"] for t in range(4)}) == 1
    shared_order = sorted(range(4), key=lambda t: seen[f"shared-{t}"][1])
    assert shared_order == [0, 1, 2, 3]
    # the tests alone are units of their own: with three workers, more than one takes them
    assert len(set(ran.values())) > 1
