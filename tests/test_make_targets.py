"""The Makefile's test target runs again in a checkout where it ran before.

``make test`` writes each test's duration to ``DURATIONS_OUT``. Given as ``--record-durations
PATH``, an existing PATH is taken for a test path by pytest's first pass over the arguments
(before the tiers plugin has registered the option), so tests/conftest.py is not loaded and
the second ``make test`` of a checkout stopped with "unrecognized arguments"; a clean clone,
where the file does not exist yet, never showed it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _record_flag(durations: Path) -> list[str]:
    """The ``--record-durations`` argument(s) of the pytest call ``make test`` runs."""
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "test", f"DURATIONS_OUT={durations}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    for line in dry.splitlines():
        if "--record-durations" not in line:
            continue
        words = shlex.split(line.replace("\\", " "))
        at = next(i for i, w in enumerate(words) if w.startswith("--record-durations"))
        return words[at : at + 1] if "=" in words[at] else words[at : at + 2]
    raise AssertionError(f"make -n test runs no pytest with --record-durations:\n{dry}")


def test_make_test_runs_again_where_its_durations_file_exists(tmp_path: Path) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text("{}")  # left by an earlier make test
    flag = _record_flag(durations)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *flag],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
    )  # fmt: skip
    assert done.returncode == 0, (flag, done.stdout[-2000:] + done.stderr[-2000:])
    assert "tests collected" in done.stdout


@pytest.mark.stack  # a venv of about 150 packages: the stack tier's
def test_make_bench_makes_its_venv_from_the_bench_lock(tmp_path: Path) -> None:
    """``make bench`` installs the bench extra pinned by ``constraints-bench.txt`` (pip's own
    resolver took over ten minutes on it) and the compiled path, then runs ``bench.compare``
    (asked only for its help here: the comparison itself takes minutes and a broker)."""
    venv = tmp_path / "venv-bench"
    done = subprocess.run(
        ["make", "--no-print-directory", "bench", f"BENCH_VENV={venv}", "BENCH_ARGS=--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "runtrail against Quix Streams" in done.stdout
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "constraints-bench.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    versions = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.metadata as m; print(m.version('quixstreams'), "
         "m.version('confluent-kafka')); import runtrail_native"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.split()  # fmt: skip
    assert versions == [pins["quixstreams"], pins["confluent-kafka"]]
