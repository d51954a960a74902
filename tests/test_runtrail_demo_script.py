"""`./runtrail-demo --framework langgraph` (issue 13: "`runtrail demo --framework langgraph`",
tried as a new user would, through the one command): the script installs the langchain extra
when the LangGraph agent is asked for, and only then, and hands the flag on to `runtrail demo`.

The script's commands are recorded by a venv whose `python` and `runtrail` log their arguments
(this checks what the script asks for; installing and the demo itself are tested elsewhere:
tests/test_adapter_langchain_e2e.py::test_the_langgraph_demo_runs_through_the_stack).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "runtrail-demo"


def recording_venv(root: Path) -> Path:
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "runtrail"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> "{root}/calls"\n')
        tool.chmod(0o755)
    return root / "venv"


@pytest.mark.parametrize(
    ("flags", "extras"),
    [
        ([], "services"),
        (["--framework", "langgraph", "--stop"], "services,langchain"),
        (["--framework=langgraph"], "services,langchain"),
        (["--framework", "scripted"], "services"),
    ],
)
def test_the_one_command_installs_what_the_framework_needs(
    flags: list[str], extras: str, tmp_path: Path
) -> None:
    venv = recording_venv(tmp_path)
    env = {**os.environ, "PYTHON": sys.executable, "VENV": str(venv)}
    done = subprocess.run(
        [str(SCRIPT), *flags], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [
        f"python -m pip install -q --disable-pip-version-check -e .[{extras}]",
        "runtrail kafka fetch",
        " ".join(["runtrail demo --up", *flags]).rstrip(),
    ]
