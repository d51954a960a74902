"""``pip install runtrail`` is small and enough to publish (issue 14 item 5).

The wheel is built from the checkout with hatchling and installed, without its dependencies
and without an index, into a fresh venv; the core dependencies' files are copied in from this
venv (the distributions the wheel's core ``Requires-Dist`` names, with their own requirements).
Nothing else is there: an agent in that venv publishes to the test broker, and none of the
extras' modules gets imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from runtrail.events import EventCodec
from runtrail.extras import EXTRAS
from tests.readme_blocks import readme_block
from tests.support import consume_all, form, produce_forms, read_lines, wait_for
from tests.venv_support import build_wheel, core_requirements, make_venv, run

#: wheels and venvs built from the checkout: an install, in the tier of the other installs
pytestmark = pytest.mark.stack

#: what an agent installs: the publisher, the events and the adapters' own code need only these
CORE = {
    "confluent-kafka",
    "fastavro",
    "pydantic",
    "pydantic-settings",
    "orjson",
    "rfc8785",
    "ahocorasick-rs",
}

AGENT = """
import json, sys
from pathlib import Path

import runtrail
from runtrail.config import Settings
from runtrail.publisher import Publisher
import runtrail.events
import runtrail.adapters.json_form, runtrail.adapters.openai_agents_map
import runtrail.adapters.otel_mapping
from runtrail.extras import EXTRAS
from runtrail.publisher.metrics import PublisherMetrics

bootstrap, topic, spool, count = sys.argv[1:5]
settings = Settings(
    bootstrap_servers=bootstrap, events_topic=topic, spool_dir=Path(spool), tenant="core"
)
with Publisher(settings) as publisher:
    ids = [publisher.publish("TOOL_CALL", f"run-{i % 3}", {"callId": f"c{i}"})
           for i in range(int(count))]
    unflushed = publisher.flush(30)
    stats = publisher.stats()
try:
    PublisherMetrics(registry=object())
    missing = None
except ImportError as exc:
    missing = str(exc)
print(json.dumps({
    "ids": ids,
    "unflushed": unflushed,
    "sent": stats.sent,
    "missing": missing,
    "runtrail": runtrail.__file__,
    "extras_imported": sorted({n.split(".")[0] for n in sys.modules} & set(EXTRAS)),
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    return make_venv(tmp_path_factory.mktemp("core") / "venv", wheel)


@pytest.fixture(scope="module")
def services_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    return make_venv(tmp_path_factory.mktemp("services") / "venv", wheel, "services")


def test_the_wheel_requires_exactly_the_core(wheel: Path) -> None:
    core, extras = core_requirements(wheel)
    assert {canonicalize_name(r.name) for r in core} == CORE
    services = {canonicalize_name(r.name) for r in extras["services"]}
    assert {"prometheus-client", "cryptography", "starlette", "uvicorn"} <= services
    assert {canonicalize_name(r.name) for r in extras["postgres"]} >= {"psycopg"}
    assert {canonicalize_name(r.name) for r in extras["s3"]} == {"obstore", "zstandard"}
    assert not services & {"psycopg", "psycopg-pool", "obstore", "zstandard", "runtrail"}
    dev = {canonicalize_name(r.name) for r in extras["dev"]}
    assert services | {"psycopg", "obstore"} <= dev  # (hatchling spells self-references out)


def test_the_wheel_ships_the_packages_and_their_markers(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for package in ("runtrail", "runtrail_services", "runtrail_schemas"):
        assert f"{package}/__init__.py" in names
        assert f"{package}/py.typed" in names
    assert "runtrail_schemas/run.accepted.v1.avsc" in names


def test_the_core_venv_holds_only_the_core(core_venv: Path) -> None:
    """``pip check``: every requirement of what is there is met, so the core is complete."""
    checked = run(sys.executable, "-m", "pip", "--python", core_venv / "bin" / "python", "check")
    assert "No broken requirements" in checked.stdout
    listed = run(
        core_venv / "bin" / "python",
        "-I",
        "-c",
        "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))",
    )
    names = {canonicalize_name(n) for n in listed.stdout.split()}
    assert "runtrail" in names and names >= CORE
    for extra_only in ("prometheus-client", "psycopg", "obstore", "zstandard", "cryptography"):
        assert extra_only not in names


@pytest.mark.kafka
def test_an_agent_publishes_with_only_the_core(
    core_venv: Path, tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: object
) -> None:
    topic = kafka_topic_factory(3)  # type: ignore[operator]
    agent = run(
        core_venv / "bin" / "python",
        "-I",
        "-c",
        AGENT,
        kafka_bootstrap,
        topic,
        tmp_path / "spool",
        "30",
        cwd=tmp_path,
    )
    result = json.loads(agent.stdout)
    assert Path(result["runtrail"]).is_relative_to(core_venv)  # the wheel, not the checkout
    assert result["extras_imported"] == []
    assert (result["unflushed"], result["sent"]) == (0, 30)
    assert None not in result["ids"]
    assert result["missing"] == (
        "Publisher metrics on a Prometheus registry needs prometheus_client: "
        "pip install 'runtrail[services]'"
    )
    codec = EventCodec()
    arrived = {
        codec.decode(m.value()).event.event_id
        for m in consume_all(kafka_bootstrap, topic, expect=30)
    }
    assert arrived == set(result["ids"])


def test_a_command_without_its_extra_names_the_extra(core_venv: Path, tmp_path: Path) -> None:
    cli = core_venv / "bin" / "runtrail"
    listed = run(cli, "--help", cwd=tmp_path)
    assert "publish" in listed.stdout
    assert "audit     (not installed: pip install 'runtrail[services]')" in listed.stdout
    refused = run(cli, "audit", "verify", "x", cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert refused.stderr == (
        "runtrail: runtrail audit needs cryptography: pip install 'runtrail[services]'\n"
    )
    assert set(EXTRAS) >= {"cryptography", "prometheus_client", "psycopg", "obstore"}


#: framework extra -> what to run with only the core and that extra installed
ADAPTERS = {
    "langchain": "import runtrail.adapters.langchain, runtrail.adapters.langchain_resumable",
    "langgraph": "import runtrail.adapters.langgraph_checkpoint",
    "otel": "import runtrail.adapters.otel",
    "openai-agents": (
        "from runtrail.adapters.openai_agents import RuntrailTracingProcessor\n"
        "processor = RuntrailTracingProcessor(object())\n"
        "processor.shutdown()\n"
        "assert processor.dropped == 0"
    ),
    "litellm": (
        "import os; os.environ['LITELLM_LOCAL_MODEL_COST_MAP'] = 'True'\n"
        "from runtrail.adapters.litellm import RuntrailLogger\n"
        "logger = RuntrailLogger(object())\n"
        "assert logger.dropped == 0"
    ),
}


@pytest.mark.parametrize("extra", ADAPTERS)
def test_an_adapter_needs_only_the_core_and_its_framework(
    tmp_path: Path, wheel: Path, extra: str
) -> None:
    venv = make_venv(tmp_path / "venv", wheel, extra)
    run(venv / "bin" / "python", "-I", "-c", ADAPTERS[extra], cwd=tmp_path)


@pytest.mark.kafka
def test_the_readme_otel_example_publishes_with_only_the_core_and_otel(
    tmp_path: Path, wheel: Path, kafka_bootstrap: str, kafka_topic_factory: object
) -> None:
    """An adapter works, not only imports: the README's OpenTelemetry example, as written,
    in a venv of the core and the otel extra, puts its run on the topic."""
    venv = make_venv(tmp_path / "venv", wheel, "otel")
    topic = kafka_topic_factory(1)  # type: ignore[operator]
    example = readme_block("<!-- tested as written by tests/test_readme_otel.py -->")
    settings = {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
    }
    run(venv / "bin" / "python", "-I", "-c", example, cwd=tmp_path, env=settings)
    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in consume_all(kafka_bootstrap, topic, expect=6)]
    assert [e.type for e in events][::5] == ["run.accepted", "run.succeeded"]
    assert len(events) == 6


#: every service and the CLI, imported where the services extra is installed without a store extra
SERVICES_IMPORT = """
import importlib, json, sys
from runtrail_tools.cli.main import build_parser
from runtrail.extras import EXTRAS
from runtrail.runtime.registry import SERVICES
build_parser()
for target in SERVICES.values():  # (the otlp-ingest receiver needs the otel extra)
    importlib.import_module(target.split(":")[0])
print(json.dumps(sorted({n.split(".")[0] for n in sys.modules} & set(EXTRAS))))
"""


def test_the_services_need_no_store_extra_to_start(services_venv: Path, tmp_path: Path) -> None:
    """Every service module and the CLI import with ``services`` alone: no store driver is
    loaded until a URL of its scheme is opened, and none is installed."""
    python = services_venv / "bin" / "python"
    listed = run(python, "-I", "-c", "import importlib.util as u; print(u.find_spec('psycopg'))")
    assert listed.stdout.strip() == "None"
    imported = json.loads(run(python, "-I", "-c", SERVICES_IMPORT, cwd=tmp_path).stdout)
    assert "psycopg" not in imported and "obstore" not in imported
    assert {"prometheus_client", "cryptography"} <= set(imported)


def test_sqlite_stores_open_and_a_postgres_url_names_its_extra(
    services_venv: Path, tmp_path: Path
) -> None:
    cli = services_venv / "bin" / "runtrail"
    store = f"sqlite:///{tmp_path / 'projection.db'}"
    missing = run(cli, "projection", "list", "--store", store, cwd=tmp_path, check=False)
    assert missing.returncode == 2 and "no SQLite database" in missing.stderr  # read: not made
    assert not (tmp_path / "projection.db").exists()
    run(  # what the projector does at its start: the store made, with its schema
        services_venv / "bin" / "python",
        "-I",
        "-c",
        "from runtrail.persistence.registry import open_store\n"
        f"open_store('projection', {store!r}).close()",
        cwd=tmp_path,
    )
    listed = run(cli, "projection", "list", "--store", store, "--json", cwd=tmp_path)
    assert (listed.stdout, listed.stderr) == ("", "")
    refused = run(
        cli,
        "projection",
        "list",
        "--store",
        "postgresql://runtrail:secret@127.0.0.1:1/runtrail",
        cwd=tmp_path,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        "runtrail: projection store at postgresql:// needs psycopg: "
        "pip install 'runtrail[postgres]'\n"
    )
    opened = run(
        services_venv / "bin" / "python",
        "-I",
        "-c",
        "from runtrail.persistence.registry import open_store\n"
        "open_store('capture', 's3://bucket/prefix')",
        cwd=tmp_path,
        check=False,
    )
    assert opened.stderr.strip().splitlines()[-1] == (
        "runtrail.extras.MissingExtra: capture sink at s3:// needs obstore: "
        "pip install 'runtrail[s3]'"
    )


@pytest.mark.kafka
def test_runtrail_run_noop_with_only_the_services_extra(
    services_venv: Path, tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: object
) -> None:
    topic = kafka_topic_factory(2)  # type: ignore[operator]
    dlq = kafka_topic_factory(2)  # type: ignore[operator]
    events = [form(run_id=f"run-{i % 4}", sequence=i // 4 + 1) for i in range(40)]
    produce_forms(kafka_bootstrap, topic, events)
    out = tmp_path / "noop.out"
    command = [
        str(services_venv / "bin" / "runtrail"),
        *("run", "noop", "--group", f"g-{topic}", "--metrics-port", "0"),
        *("--bootstrap-servers", kafka_bootstrap, "--events-topic", topic),
        *("-o", f"output={out}"),
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RUNTRAIL_DLQ_TOPIC": dlq,
        "RUNTRAIL_COMMIT_INTERVAL_MS": "200",
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
    }
    with (tmp_path / "noop.log").open("wb") as log:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=log)
        try:
            wait_for(lambda: len(read_lines(out)) >= len(events), 60, what="noop output")
        finally:
            proc.terminate()
            code = proc.wait(timeout=60)
    assert code == 0, (tmp_path / "noop.log").read_text()
    assert {line.split(" ", 1)[0] for line in read_lines(out)} == {e["eventId"] for e in events}
