"""Each extra alone, with the core and nothing else, does what the README's "Install" table says
(issue 26 item 1).

The dev venv has every extra, so an import of one extra's module at module level of code that
another extra's features load goes unseen there (``./runtrail-demo`` failed on a clean machine
for psycopg, which the SQLite command store imported). Here each extra gets a venv of its own,
made offline from this checkout's wheel (``tests/venv_support.py``), and its features run:
with ``services`` alone every command's help, the demo's imports and every embedded store the
demo opens; a ``postgresql://`` or ``s3://`` URL there names its extra. The probes that run
inside a venv are ``tests/extras_probe.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtrail.extras import EXTRAS
from tests.readme_blocks import readme_block
from tests.venv_support import ROOT, build_wheel, make_venv, run

#: a venv per extra: minutes of work, so the stack tier's, not make test-fast's
pytestmark = pytest.mark.stack
PROBE = Path(__file__).with_name("extras_probe.py")
#: the store drivers and frameworks: never loaded by the services' embedded defaults
NOT_SERVICES = {"psycopg", "psycopg_pool", "obstore", "zstandard", "langchain_core", "langgraph"}
NOT_SERVICES |= {"opentelemetry", "google", "agents", "litellm"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def venv_of(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Callable[[str], Path]:
    """The venv of the core and one extra, made once for the module."""
    made: dict[str, Path] = {}

    def venv(extra: str) -> Path:
        if extra not in made:
            made[extra] = make_venv(tmp_path_factory.mktemp(extra) / "venv", wheel, extra)
        return made[extra]

    return venv


@pytest.fixture(scope="module")
def services_venv(venv_of: Callable[[str], Path]) -> Path:
    return venv_of("services")


def probe(venv: Path, *args: str | Path, cwd: Path) -> dict[str, Any]:
    """What ``tests/extras_probe.py`` prints, run by the venv's interpreter alone."""
    done = run(venv / "bin" / "python", "-I", PROBE, *args, cwd=cwd, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def installed(venv: Path, modules: set[str]) -> set[str]:
    """Which of ``modules`` the venv can import."""
    code = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    return set(run(venv / "bin" / "python", "-I", "-c", code, *sorted(modules)).stdout.split())


def test_each_extra_installs_the_modules_the_table_of_extras_names(
    venv_of: Callable[[str], Path],
) -> None:
    """``runtrail.extras.EXTRAS`` tells a user which extra to install for a module: that extra
    alone must bring it."""
    for extra in sorted(set(EXTRAS.values())):
        venv = venv_of(extra)
        named = {module for module, e in EXTRAS.items() if e == extra}
        assert installed(venv, named) == named, extra


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
        "runtrail: runtrail run otlp-ingest needs opentelemetry: pip install 'runtrail[otel]'\n",
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
