"""docker-compose.yml and deploy/Dockerfile: valid, and consistent with the local stack.

No Docker engine is needed: Debian's ``docker-compose config`` (1.29) and the Compose
Specification's JSON schema (as vendored by the ``check-jsonschema`` package, offline) validate
the file; the rest holds it against the code: the port table, the service commands, every
``RUNTRAIL_*`` variable naming a real setting.
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtrail.config import Settings
from runtrail.runtime.registry import RECEIVERS, SERVICES
from runtrail_tools.demo.targets import DemoSettings
from runtrail_tools.devstack.ports import DEFAULT_BASE, METRICS_OFFSETS, UI_OFFSET, plan_ports
from runtrail_tools.devstack.service_settings import importable, settings_info
from runtrail_tools.ui.settings import UiSettings
from tests.kafka_fixture import services_required

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


def missing(what: str) -> None:
    if services_required():
        pytest.fail(f"{what} is not installed")
    pytest.skip(f"{what} is not installed")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def api_services() -> list[str]:
    return [n for n in SERVICES if importable(n) and settings_info(n).has("http_port")]


def test_docker_compose_config_accepts_the_file() -> None:
    tool = shutil.which("docker-compose")
    if tool is None:
        missing("docker-compose (Debian: docker-compose)")
    done = subprocess.run(
        [str(tool), "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_file_validates_against_the_compose_specification_schema(
    compose: dict[str, Any],
) -> None:
    try:
        vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    except ModuleNotFoundError:
        missing("check-jsonschema (dev extra)")
    import jsonschema

    schema = json.loads(vendor.joinpath("compose-spec.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    broken = dict(compose, services={"x": {"image": "a", "ports": "not a list"}})
    assert list(validator.iter_errors(broken))  # the schema does catch mistakes


def test_every_service_runs_on_the_local_stacks_ports(compose: dict[str, Any]) -> None:
    services = compose["services"]
    plan = plan_ports(list(SERVICES), with_api=api_services())
    for name in SERVICES:
        assert name in services, f"{name} is registered but not in docker-compose.yml"
        spec = services[name]
        port = plan.metrics[name]
        assert spec["command"] == ["run", name, "--metrics-port", str(port)]
        assert f"{port}:{port}" in spec["ports"]
        assert spec["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}
        assert "healthcheck" in spec and str(port) == spec["environment"]["RT_PORT"]
        if name in plan.api:
            api = plan.api[name]
            assert f"{api}:{api}" in spec["ports"]
            env_name = settings_info(name).env_name("http_port")
            assert spec["environment"][env_name] == str(api)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert f"{Settings().kafka_port}:9094" in services["kafka"]["ports"]
    assert "HOST://127.0.0.1:9092" in services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    for infra in ("minio", "postgres", "prometheus", "grafana", "topics"):
        assert infra in services
    assert services["topics"]["command"] == ["topics", "ensure"]


def receiver_port(name: str) -> int:
    """A receiver's metrics port: the port table's, else its own default (otlp-ingest's)."""
    module, _, attr = RECEIVERS[name].partition(":")
    default = int(getattr(importlib.import_module(module), attr).default_port)
    offset = METRICS_OFFSETS.get(name)
    return DEFAULT_BASE + offset if offset is not None else default


def test_every_receiver_and_the_ui_run_too(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in RECEIVERS:
        spec = services[name]
        port = receiver_port(name)
        assert spec["command"] == ["run", name, "--metrics-port", str(port)], name
        assert f"{port}:{port}" in spec["ports"] and spec["environment"]["RT_PORT"] == str(port)
        info = settings_info(name)
        if info.has("http_port"):
            api = spec["environment"][info.env_name("http_port")]
            assert f"{api}:{api}" in spec["ports"], name
            assert spec["environment"][info.env_name("http_host")] == "0.0.0.0"
    relay, api = services["outbox-relay"], services["command-api"]
    # the relay publishes the outbox of the very store the command API appends to
    assert (
        relay["environment"]["RUNTRAIL_OUTBOX_RELAY_STORE"]
        == api["environment"]["RUNTRAIL_COMMAND_API_STORE"]
    )
    ui = services["ui"]
    port = str(DEFAULT_BASE + UI_OFFSET)
    assert ui["command"] == ["ui", "--host", "0.0.0.0", "--port", port]
    assert f"{port}:{port}" in ui["ports"]


def test_kafka_is_three_brokers_keeping_every_topic_on_three_replicas(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    brokers = [services[name] for name in ("kafka", "kafka-2", "kafka-3")]
    voters = {b["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"] for b in brokers}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert [b["environment"]["KAFKA_NODE_ID"] for b in brokers] == ["1", "2", "3"]
    assert len({b["environment"]["CLUSTER_ID"] for b in brokers}) == 1
    for broker in brokers:
        env = broker["environment"]
        for key in (
            "KAFKA_DEFAULT_REPLICATION_FACTOR",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        ):
            assert env[key] == "3", key
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    runtrail = services["topics"]["environment"]
    assert runtrail["RUNTRAIL_REPLICATION_FACTOR"] == "3"  # so min.insync.replicas 2 (ensure)
    assert runtrail["RUNTRAIL_BOOTSTRAP_SERVERS"] == "kafka:9092,kafka-2:9092,kafka-3:9092"
    assert {name: {"condition": "service_healthy"} for name in ("kafka", "kafka-2", "kafka-3")} == (
        services["topics"]["depends_on"]
    )


def test_the_demo_is_a_one_shot_naming_every_service(compose: dict[str, Any]) -> None:
    demo = compose["services"]["demo"]
    plan = plan_ports(list(SERVICES), with_api=api_services())
    assert demo["restart"] == "no" and demo["command"][0] == "demo"
    assert demo["command"][1:] == ["--metrics-port", str(plan.agent)]
    named = json.loads(demo["environment"]["RUNTRAIL_DEMO_SERVICES"])
    assert named == {n: f"http://{n}:{plan.metrics[n]}" for n in SERVICES}
    apis = json.loads(demo["environment"]["RUNTRAIL_DEMO_APIS"])
    assert apis == {n: f"http://{n}:{plan.api[n]}" for n in plan.api if n == "resume-cache"}
    for name in SERVICES:
        assert demo["depends_on"][name] == {"condition": "service_healthy"}


def known_variables() -> set[str]:
    names = {f"RUNTRAIL_{f}".upper() for f in Settings.model_fields}
    names |= {f"RUNTRAIL_DEMO_{f}".upper() for f in DemoSettings.model_fields}
    names |= {f"RUNTRAIL_UI_{f}".upper() for f in UiSettings.model_fields}
    for name in [*SERVICES, *RECEIVERS]:
        info = settings_info(name)
        names |= {info.env_name(f) for f in info.fields}
    return names


def test_every_runtrail_variable_is_a_real_setting(compose: dict[str, Any]) -> None:
    known = known_variables()
    for name, spec in compose["services"].items():
        for var in spec.get("environment") or {}:
            if var.startswith("RUNTRAIL_"):
                assert var in known, f"{name}: {var} is not a runtrail setting"


def test_mounted_files_exist_and_the_dockerfile_copies_what_exists(
    compose: dict[str, Any],
) -> None:
    for spec in compose["services"].values():
        for volume in spec.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), source
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M):
        for item in source.split():
            assert (REPO / item).exists(), item
    assert 'ENTRYPOINT ["runtrail"]' in dockerfile
    # the services and the stores compose points them at
    assert "'.[services,postgres,s3]'" in dockerfile


def test_the_image_runs_the_compiled_consume_path() -> None:
    """The image builds shared/runtrail_native in a Rust stage, installs its wheel, and its
    services refuse to start without it (an image on the slower path by accident is a
    defect nobody would see); the build context leaves out build outputs and local state."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert re.search(r"^FROM rust:\S+ AS native$", dockerfile, re.M)
    assert "maturin build --release --locked" in dockerfile
    assert "COPY --from=native /wheels /wheels" in dockerfile
    assert "RUNTRAIL_NATIVE=required" in dockerfile
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {"**/target", ".venv", ".runtrail"} <= set(ignored)
