"""Each extra installs alone, as a user installs it: from a clean clone of HEAD, with the lock,
through the package index, into a fresh venv of its own.

``pip check`` then finds every requirement met, ``runtrail --help`` answers, and what the extra is
for imports (the README example's imports, or a command's ``--help``). So no extra works only
because another one came along (the dev install has them all, and CI alone would not see it).
uv installs them: it resolves and installs as pip does, in a second or two a venv.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_new_user import clone_head, new_user_env

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


@dataclass(frozen=True)
class Extra:
    name: str
    #: Python run in the venv: what a user of the extra writes first
    imports: str
    #: a command of the ``runtrail`` console script that must answer 0
    command: tuple[str, ...] = ("--help",)


EXTRAS = (
    Extra(
        "services",
        "import runtrail_services, runtrail.runtime.service, runtrail_tools.devstack.stack",
        ("run", "audit", "--help"),
    ),
    Extra("postgres", "import psycopg, runtrail.persistence.postgres"),
    Extra("s3", "import obstore, zstandard, runtrail.capture.object_sink"),
    Extra("langchain", "from runtrail.adapters.langchain import RuntrailCallbackHandler"),
    Extra(
        "langgraph",
        "from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver",
    ),
    Extra("otel", "from runtrail.adapters.otel import RuntrailSpanExporter"),
    Extra("openai-agents", "from runtrail.adapters.openai_agents import install"),
    Extra(
        "litellm",  # (its import asks the network for a cost map unless told the local one)
        "import os; os.environ['LITELLM_LOCAL_MODEL_COST_MAP'] = 'True'\n"
        "from runtrail.adapters.litellm import RuntrailLogger",
    ),
    Extra("commands", "import starlette, uvicorn", ("command", "--help")),
)


@dataclass
class Installed:
    extra: Extra
    python: Path
    install: subprocess.CompletedProcess[str]


def install_alone(clone: Path, root: Path, extra: Extra) -> Installed:
    venv = root / f"venv-{extra.name}"
    env = new_user_env()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    command = [UV or "uv", "pip", "install", "-q", "--python", str(python)]
    done = subprocess.run(
        [*command, "-c", "constraints.txt", f".[{extra.name}]"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return Installed(extra, python, done)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Installed]]:
    if UV is None:
        pytest.fail("uv is not installed (the dev extra brings it)")
    root = tmp_path_factory.mktemp("extras")
    clone = clone_head(root / "runtrail")
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(lambda e: install_alone(clone, root, e), EXTRAS))
    yield {i.extra.name: i for i in done}


@pytest.mark.stack
@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: e.name)
def test_an_extra_installs_alone_and_its_first_lines_work(
    extra: Extra, installed: dict[str, Installed]
) -> None:
    found = installed[extra.name]
    assert found.install.returncode == 0, found.install.stderr
    env = new_user_env()
    checked = subprocess.run(
        [UV or "uv", "pip", "check", "--python", str(found.python)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    imported = subprocess.run(
        [str(found.python), "-I", "-c", extra.imports],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    cli = found.python.parent / "runtrail"
    for command in (("--help",), extra.command):
        answered = subprocess.run(
            [str(cli), *command], capture_output=True, text=True, env=env, timeout=120
        )
        assert answered.returncode == 0, f"runtrail {' '.join(command)}: {answered.stderr}"
