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
    calls = run_script(tmp_path, venv, flags, cargo=False)
    assert calls == [
        f"python -m pip install -q --disable-pip-version-check -e .[{extras}]",
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
    native_install = "python -m pip install -q --disable-pip-version-check ./shared/runtrail_native"
    assert (native_install in calls) is built
    assert calls[-1] == "runtrail demo --up"
