"""`./runtrail-demo --framework langgraph` (issue 13: "`runtrail demo --framework langgraph`",
tried as a new user would, through the one command): the script installs the langchain extra
when the LangGraph agent is asked for, and only then, and hands the flag on to `runtrail demo`.
`--help` (issue 26) answers at once, installing nothing, and names `runtrail demo`'s flags.

The script's commands are recorded by a venv whose `python` and `runtrail` log their arguments
(this checks what the script asks for; installing and the demo itself are tested elsewhere:
tests/test_adapter_langchain_e2e.py::test_the_langgraph_demo_runs_through_the_stack).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtrail_tools.cli.main import build_parser

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
    calls = run_script(tmp_path, venv, flags, cargo=False)
    assert calls == [
        f"python -m pip install -q --disable-pip-version-check -c constraints.txt -e .[{extras}]",
        "runtrail kafka fetch",
        " ".join(["runtrail demo --up", *flags]).rstrip(),
    ]


def run_script(root: Path, venv: Path, flags: list[str], *, cargo: bool, **env: str) -> list[str]:
    """Run the script with PATH holding the system tools and, if ``cargo``, a cargo."""
    tools = root / "tools"
    tools.mkdir(exist_ok=True)
    if cargo:
        fake = tools / "cargo"
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
    path = f"{tools}:/usr/bin:/bin"
    full_env = {k: v for k, v in os.environ.items() if k != "RUNTRAIL_NATIVE"}
    full_env.update(PATH=path, PYTHON=sys.executable, VENV=str(venv), **env)
    done = subprocess.run(
        [str(SCRIPT), *flags], env=full_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return (root / "calls").read_text().splitlines()


@pytest.mark.parametrize(("cargo", "native", "built"), [(True, None, True), (True, "off", False)])
def test_the_compiled_path_is_built_when_cargo_is_there_unless_turned_off(
    cargo: bool, native: str | None, built: bool, tmp_path: Path
) -> None:
    venv = recording_venv(tmp_path)
    env = {} if native is None else {"RUNTRAIL_NATIVE": native}
    calls = run_script(tmp_path, venv, [], cargo=cargo, **env)
    # the wheel comes from tools/native_wheel.py (built once per content hash), then installed
    assert ("python tools/native_wheel.py" in calls) is built
    assert calls[-1] == "runtrail demo --up"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_answers_at_once_and_installs_nothing(flag: str, tmp_path: Path) -> None:
    """From a copy of the script in an empty folder, with the real Python: no venv appears
    (before this, ``--help`` created the venv and installed everything first)."""
    copy = tmp_path / "runtrail-demo"
    shutil.copy2(SCRIPT, copy)
    env = {k: v for k, v in os.environ.items() if k != "VENV"}
    env["PYTHON"] = sys.executable
    started = time.monotonic()
    done = subprocess.run(
        [str(copy), "--framework", "langgraph", flag],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ./runtrail-demo"), done.stdout
    assert done.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runtrail-demo"]  # no .venv
    assert elapsed < 1.0, elapsed


def test_every_flag_the_help_names_is_a_flag_of_runtrail_demo_and_none_is_left_out() -> None:
    """The usage lists ``runtrail demo``'s flags by hand: this keeps the list honest both
    ways (a flag renamed or removed, or one added and not listed, fails here)."""
    usage = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=10)
    named = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", usage.stdout))
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    demo = commands.choices["demo"]
    options = {o for action in demo._actions for o in action.option_strings}
    assert named - options == set(), "named in the usage, unknown to runtrail demo"
    assert options - named == set(), "flags of runtrail demo the usage does not name"
