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
