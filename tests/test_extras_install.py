"""Each extra installs alone, as a user installs it, and does what the README's "Install" table
says: from a clean clone of HEAD, with the lock, through the package index, into a fresh venv of
its own.

``pip check`` then finds every requirement met, ``runtrail --help`` answers, and what the extra is
for imports (the README example's imports, or a command's ``--help``). So no extra works only
because another one came along (the dev install has them all, and CI alone would not see it):
``./runtrail-demo`` once failed on a clean machine for psycopg, which the SQLite command store
imported. Then each extra's features run in its venv: with ``services`` alone every command's
help, the demo's imports and every embedded store the demo opens; a ``postgresql://`` or
``s3://`` URL there names its extra; each framework extra runs its documented example. The
probes that run inside a venv are ``tests/extras_probe.py``. uv installs the venvs: it resolves
and installs as pip does, in a second or two a venv; each is made once for the module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtrail.extras import EXTRAS as EXTRA_OF_MODULE
from tests.readme_blocks import readme_block
from tests.test_new_user import clone_head, new_user_env
from tests.venv_support import ROOT, run

#: a venv per extra: minutes of work, so the stack tier's, not make test-fast's
pytestmark = pytest.mark.stack

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


@pytest.fixture(scope="module")
def venv_of(installed: dict[str, Installed]) -> Callable[[str], Path]:
    """The venv of the core and one extra, as a user installed it (the fixture above)."""

    def venv(extra: str) -> Path:
        found = installed[extra]
        assert found.install.returncode == 0, found.install.stderr
        return found.python.parent.parent

    return venv


@pytest.fixture(scope="module")
def services_venv(venv_of: Callable[[str], Path]) -> Path:
    return venv_of("services")


PROBE = Path(__file__).with_name("extras_probe.py")
#: the store drivers and frameworks: never loaded by the services' embedded defaults
NOT_SERVICES = {"psycopg", "psycopg_pool", "obstore", "zstandard", "langchain_core", "langgraph"}
NOT_SERVICES |= {"opentelemetry", "google", "agents", "litellm"}


def probe(venv: Path, *args: str | Path, cwd: Path) -> dict[str, Any]:
    """What ``tests/extras_probe.py`` prints, run by the venv's interpreter alone."""
    done = run(venv / "bin" / "python", "-I", PROBE, *args, cwd=cwd, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def importable(venv: Path, modules: set[str]) -> set[str]:
    """Which of ``modules`` the venv can import."""
    code = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    return set(run(venv / "bin" / "python", "-I", "-c", code, *sorted(modules)).stdout.split())


def test_each_extra_installs_the_modules_the_table_of_extras_names(
    venv_of: Callable[[str], Path],
) -> None:
    """``runtrail.extras.EXTRAS`` tells a user which extra to install for a module: that extra
    alone must bring it."""
    for extra in sorted(set(EXTRA_OF_MODULE.values())):
        venv = venv_of(extra)
        named = {module for module, e in EXTRA_OF_MODULE.items() if e == extra}
        assert importable(venv, named) == named, extra


#: walks the parser: every command and subcommand (and each service of ``run``) asked --help
HELP_WALK = """
import argparse, contextlib, io, json
from runtrail_tools.cli.main import build_parser
from runtrail.runtime.registry import RECEIVERS, SERVICES

def paths(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from paths(sub, (*prefix, name))

walked = [*paths(build_parser()), *[("run", name) for name in [*SERVICES, *RECEIVERS]]]
failed = {}
for path in walked:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            build_parser().parse_args([*path, "--help"])
        failed[" ".join(path)] = "no help"
    except SystemExit as exc:
        if exc.code != 0:
            failed[" ".join(path)] = out.getvalue()[-400:]
print(json.dumps({"walked": [" ".join(p) for p in walked], "failed": failed}))
"""


def test_with_services_alone_every_command_answers_its_help(
    services_venv: Path, tmp_path: Path
) -> None:
    cli = services_venv / "bin" / "runtrail"
    listed = run(cli, "--help", cwd=tmp_path)
    assert "not installed" not in listed.stdout
    for group in ("run", "audit", "capture", "dev", "demo", "ui", "command", "sessions"):
        assert f"\n    {group} " in listed.stdout
    for command in (("demo", "--help"), ("dev", "up", "--help"), ("command", "--help")):
        assert run(cli, *command, cwd=tmp_path).stdout.startswith("usage: runtrail")
    python = services_venv / "bin" / "python"
    walk = json.loads(run(python, "-I", "-c", HELP_WALK, cwd=tmp_path).stdout)
    assert walk["failed"] == {}
    assert {"audit verify", "capture query", "dev up", "run command-api", "command approve"} <= set(
        walk["walked"]
    )


def test_with_services_alone_the_demo_opens_every_embedded_store(
    services_venv: Path, tmp_path: Path
) -> None:
    """What ``runtrail demo --up`` imports, and each store it opens on the state folder: the
    command store (SQLite) behind a serving command API, the capture files, the projection,
    audit and resume-cache databases, the session files, read back as the demo reads them."""
    state = tmp_path / "state"
    state.mkdir()
    result = probe(services_venv, "demo", state, cwd=tmp_path)
    assert result["command_api_status"] == 401  # served: no token configured
    views = result["views"]
    assert isinstance(views, dict)
    assert views["commands"] == {"version": 0, "events": 0, "granted_by": []}
    assert views["audit"] == {"links": 0, "valid": True, "reason": None, "first_broken_index": None}
    assert views["capture"]["model_nodes"] == 0 and views["cache"]["tool_entries"] == 0
    assert views["projection"]["status"] is None and views["session"]["events"] == 0
    assert result["outbox_pending"] == 0
    expected = ["audit.db", "capture", "commands.db", "projection.db", "resume-cache.db"]
    assert set(expected) <= set(result["state"])
    imported = set(result["extras_imported"])
    assert {"prometheus_client", "cryptography", "starlette", "uvicorn"} <= imported
    assert not imported & NOT_SERVICES


#: every kind of store with a PostgreSQL adapter (capture has none: files and object stores)
POSTGRES_KINDS = ("projection", "audit", "commands", "resume-cache", "sessions", "checkpoints")


def test_with_services_alone_postgresql_and_s3_urls_name_their_extra(
    services_venv: Path, tmp_path: Path
) -> None:
    result = probe(services_venv, "refusals", cwd=tmp_path)
    assert result["postgresql"] == {
        **dict.fromkeys(POSTGRES_KINDS, "missing postgres"),
        "capture": "unsupported",
        "content": "missing postgres",
        "keys": "unsupported",
    }
    assert result["s3"] == {
        **dict.fromkeys(POSTGRES_KINDS, "unsupported"),
        "capture": "missing s3",
        "content": "missing s3",
        "keys": "unsupported",
    }
    cli = services_venv / "bin" / "runtrail"
    url = "postgresql://runtrail:secret@127.0.0.1:1/runtrail"
    refused = run(cli, "resume", "r1", "--tenant", "t", "--store", url, cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert "pip install 'runtrail[postgres]'" in refused.stderr
    receiver = run(cli, "run", "otlp-ingest", cwd=tmp_path, check=False)
    assert (receiver.returncode, receiver.stderr) == (
        2,
        "runtrail: runtrail run otlp-ingest needs protobuf: pip install 'runtrail[otel]'\n",
    )


def test_postgres_alone_has_every_postgresql_adapter(
    tmp_path: Path, venv_of: Callable[[str], Path]
) -> None:
    """Each kind's PostgreSQL adapter is there and tries the server (nothing listens on the
    port); the audit store also needs ``services`` (its signatures) and says so."""
    venv = venv_of("postgres")
    result = probe(venv, "refusals", cwd=tmp_path)
    outcomes = result["postgresql"]
    assert isinstance(outcomes, dict)
    assert outcomes.pop("audit") == "missing services"
    assert outcomes.pop("capture") == "unsupported"
    assert outcomes.pop("keys") == "unsupported"  # tenant keys: files (or a KMS), never SQL
    for kind, outcome in outcomes.items():
        assert outcome in ("OperationalError", "SessionStoreError", "StoreUnavailable"), kind
    run(venv / "bin" / "python", "-I", "-c", "import runtrail.persistence.postgres", cwd=tmp_path)
    run(venv / "bin" / "runtrail", "projection", "--help", cwd=tmp_path)


def test_s3_alone_opens_an_object_store_capture_sink(
    tmp_path: Path, venv_of: Callable[[str], Path]
) -> None:
    venv = venv_of("s3")
    result = probe(venv, "s3", cwd=tmp_path)
    assert result == {"sink": "ObjectStoreSink", "extras_imported": ["obstore", "zstandard"]}
    run(venv / "bin" / "runtrail", "replay", "--help", cwd=tmp_path)


def imports_of(block: str) -> str:
    """The import statements of a documented example (its top-level ``import``/``from``)."""
    return "\n".join(line for line in block.splitlines() if line.startswith(("import ", "from ")))


#: where the README's framework examples are, by the test that runs each with a broker
MARKERS = {
    "langchain": (
        "<!-- tested as written by tests/test_adapter_langchain_readme.py (observe) -->",
        "<!-- tested as written by tests/test_adapter_langchain_readme.py (resume) -->",
    ),
    "otel": ("<!-- tested as written by tests/test_readme_otel.py -->",),
    "openai-agents": ("<!-- tested as written by tests/test_adapter_openai_agents_readme.py -->",),
    "litellm": ("<!-- tested as written by tests/test_adapter_litellm_readme.py -->",),
}
#: litellm's import asks the network for its model cost map unless told to read its own copy
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
#: the LangGraph checkpointer's example (docs/ADAPTERS.md) needs no broker: it runs whole
CHECKPOINTER_FOLDER = "file:///tmp/runtrail-sessions"


def documented_example(extra: str, folder: Path) -> str:
    """What a user of ``extra`` runs first: the imports of its README examples, or the whole
    LangGraph checkpointer example (its store in ``folder``)."""
    if extra == "langgraph":
        adapters = ROOT / "docs" / "ADAPTERS.md"
        example = readme_block("## LangGraph checkpointer", source=adapters)
        assert CHECKPOINTER_FOLDER in example
        return example.replace(CHECKPOINTER_FOLDER, folder.as_uri())
    return "\n".join(imports_of(readme_block(marker)) for marker in MARKERS[extra])


@pytest.mark.parametrize("extra", ["langchain", "langgraph", "otel", "openai-agents", "litellm"])
def test_a_framework_extra_alone_runs_its_documented_example(
    tmp_path: Path, venv_of: Callable[[str], Path], extra: str
) -> None:
    venv = venv_of(extra)
    code = documented_example(extra, tmp_path / "sessions")
    assert "from runtrail.adapters." in code
    done = run(venv / "bin" / "python", "-I", "-c", code, cwd=tmp_path, check=False, env=OFFLINE)
    assert done.returncode == 0, done.stderr
    assert run(venv / "bin" / "runtrail", "--help", cwd=tmp_path).stdout.startswith("usage:")


def test_otel_alone_is_the_exporter_not_the_receiver(
    tmp_path: Path, venv_of: Callable[[str], Path]
) -> None:
    """The otlp-ingest receiver is a service: with ``otel`` alone it names ``services``."""
    venv = venv_of("otel")
    refused = run(venv / "bin" / "runtrail", "run", "otlp-ingest", cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert refused.stderr.endswith("pip install 'runtrail[services]'\n")


def test_commands_alone_serves_the_command_api(
    tmp_path: Path, venv_of: Callable[[str], Path]
) -> None:
    """The command API and its outbox relay run with ``commands`` alone (on the embedded
    SQLite store); the rest of the services still name ``services``."""
    venv = venv_of("commands")
    state = tmp_path / "state"
    state.mkdir()
    result = probe(venv, "command-api", state, cwd=tmp_path)
    assert result["command_api_status"] == 401
    assert {name.split("-")[0] for name in result["state"]} == {"commands.db"}  # (+ -wal)
    assert not set(result["extras_imported"]) & {"cryptography", *NOT_SERVICES}
    cli = venv / "bin" / "runtrail"
    for command in (("command", "--help"), ("run", "command-api", "--help")):
        assert run(cli, *command, cwd=tmp_path).stdout.startswith("usage: runtrail")
    refused = run(cli, "audit", "verify", "x", cwd=tmp_path, check=False)
    assert refused.stderr.endswith("pip install 'runtrail[services]'\n")
