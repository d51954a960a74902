"""deploy/k8s: valid against the Kubernetes schemas and KEDA's, and complete for every service.

* Kubernetes objects: ``kubernetes-validate`` (the API's JSON schemas bundled in the package,
  offline), strict: an unknown field is an error.
* KEDA ScaledObjects: the models ``cloudcoil-models-keda`` generates from KEDA's CRD schema
  (offline, in the package). They ignore unknown fields, so a round trip must give back exactly
  the manifest: a misspelled field is dropped and fails the comparison.
* Structure: every registered service has a Deployment (probes on /healthz and /readyz,
  Prometheus annotations, resource requests, the port table's port) and a ScaledObject on its
  consumer group's lag; ConfigMap keys are real settings.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtrail.config import Settings
from runtrail.runtime.registry import RECEIVERS, SERVICES
from runtrail_tools.devstack.ports import plan_ports
from runtrail_tools.devstack.service_settings import importable, settings_info
from runtrail_tools.ui.settings import UiSettings
from tests.kafka_fixture import services_required

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"


def missing(what: str) -> None:
    if services_required():
        pytest.fail(f"{what} is not installed")
    pytest.skip(f"{what} is not installed")


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_kubernetes_objects_validate_strictly(objects: list[dict[str, Any]]) -> None:
    try:
        import kubernetes_validate
    except ModuleNotFoundError:
        missing("kubernetes-validate (dev extra)")
    checked = 0
    for obj in objects:
        if obj["apiVersion"].startswith("keda.sh/"):
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked >= len(SERVICES) + 3
    bad = of_kind(objects, "Deployment")["runtrail-capture"]
    broken = {**bad, "spec": {**bad["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def keda_round_trip(obj: dict[str, Any]) -> dict[str, Any]:
    try:
        from cloudcoil.models.keda.v1alpha1 import ScaledObject
    except ModuleNotFoundError:
        missing("cloudcoil-models-keda (dev extra)")
    model = ScaledObject.model_validate(obj)
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dumped


def test_scaled_objects_validate_against_kedas_crd_models(objects: list[dict[str, Any]]) -> None:
    scaled = of_kind(objects, "ScaledObject")
    assert scaled
    for obj in scaled.values():
        assert keda_round_trip(obj) == obj
    sample = next(iter(scaled.values()))
    typo = {**sample, "spec": {**sample["spec"], "maxReplicas": 3}}
    assert keda_round_trip(typo) != typo  # a misspelled field is caught by the round trip


def test_every_service_has_a_deployment_and_a_lag_scaled_object(
    objects: list[dict[str, Any]],
) -> None:
    deployments = of_kind(objects, "Deployment")
    scaled = of_kind(objects, "ScaledObject")
    with_api = [n for n in SERVICES if importable(n) and settings_info(n).has("http_port")]
    plan = plan_ports(list(SERVICES), with_api=with_api)
    partitions = Settings().partitions
    for name in SERVICES:
        deployment = deployments[f"runtrail-{name}"]
        pod = deployment["spec"]["template"]
        container = pod["spec"]["containers"][0]
        port = plan.metrics[name]
        assert container["args"] == ["run", name, "--metrics-port", str(port)]
        assert {"name": "metrics", "containerPort": port} in container["ports"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert pod["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(port),
            "prometheus.io/path": "/metrics",
        }
        refs = [next(iter(e.values()))["name"] for e in container["envFrom"]]
        assert refs == ["runtrail-settings", "runtrail-secrets"]
        if name in plan.api:
            assert {"name": "api", "containerPort": plan.api[name]} in container["ports"]
        spec = scaled[f"runtrail-{name}"]["spec"]
        assert spec["scaleTargetRef"] == {"name": f"runtrail-{name}"}
        assert spec["maxReplicaCount"] <= partitions  # more members than partitions idle
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "kafka"
        assert trigger["metadata"]["consumerGroup"] == f"runtrail.{name}"
        assert trigger["metadata"]["topic"] == Settings().events_topic
        assert int(trigger["metadata"]["lagThreshold"]) > 0


def test_configmap_and_secret_hold_real_settings(objects: list[dict[str, Any]]) -> None:
    known = {f"RUNTRAIL_{f}".upper() for f in Settings.model_fields}
    for name in SERVICES:
        info = settings_info(name)
        known |= {info.env_name(f) for f in info.fields}
    for name in RECEIVERS:
        info = settings_info(name)
        known |= {info.env_name(f) for f in info.fields}
    known |= {f"RUNTRAIL_UI_{f}".upper() for f in UiSettings.model_fields}
    config = of_kind(objects, "ConfigMap")["runtrail-settings"]["data"]
    secret = of_kind(objects, "Secret")["runtrail-secrets"]["stringData"]
    for key in [*config, *secret]:
        assert key in known or not key.startswith("RUNTRAIL_"), key
    assert "RUNTRAIL_BOOTSTRAP_SERVERS" in config
    assert not any("TOKEN" in key for key in config)  # tokens are secrets
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def receiver_port(name: str) -> int:
    module, _, attr = RECEIVERS[name].partition(":")
    return int(getattr(importlib.import_module(module), attr).default_port)


def test_every_receiver_and_the_ui_have_a_deployment(objects: list[dict[str, Any]]) -> None:
    deployments = of_kind(objects, "Deployment")
    scaled = of_kind(objects, "ScaledObject")
    config = of_kind(objects, "ConfigMap")["runtrail-settings"]["data"]
    for name in RECEIVERS:
        pod = deployments[f"runtrail-{name}"]["spec"]["template"]
        container = pod["spec"]["containers"][0]
        port = receiver_port(name)
        assert container["args"] == ["run", name, "--metrics-port", str(port)]
        assert {"name": "metrics", "containerPort": port} in container["ports"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port)
        assert f"runtrail-{name}" not in scaled  # no consumer group: no lag to scale on
        info = settings_info(name)
        if info.has("http_port"):
            env = {e["name"]: e.get("value") for e in container["env"]}
            api = int(env[info.env_name("http_port")])
            assert api in {p["containerPort"] for p in container["ports"]}
            assert env[info.env_name("http_host")] == "0.0.0.0"
    relay = deployments["runtrail-outbox-relay"]["spec"]
    # one active relay per store: a second would only fence the first
    assert relay["replicas"] == 1 and relay["strategy"] == {"type": "Recreate"}
    assert config["RUNTRAIL_OUTBOX_RELAY_STORE"] == config["RUNTRAIL_COMMAND_API_STORE"]
    ui = deployments["runtrail-ui"]["spec"]["template"]["spec"]["containers"][0]
    assert ui["args"] == ["ui", "--host", "0.0.0.0", "--port", "9480"]
    assert ui["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


KAFKA_MOUNT = "/etc/runtrail/kafka"


def test_kafka_credentials_come_from_a_mounted_secret(objects: list[dict[str, Any]]) -> None:
    """Every pod that talks to Kafka (each Deployment, the topics Job) reads the SASL password
    from the runtrail-kafka Secret mounted as a file, and nothing carries it in the clear."""
    secret = of_kind(objects, "Secret")["runtrail-kafka"]["stringData"]
    config = of_kind(objects, "ConfigMap")["runtrail-settings"]["data"]
    pods = [d["spec"]["template"]["spec"] for d in of_kind(objects, "Deployment").values()]
    pods += [j["spec"]["template"]["spec"] for j in of_kind(objects, "Job").values()]
    assert len(pods) == len(SERVICES) + len(RECEIVERS) + 2  # + ui + topics job
    for pod in pods:
        (container,) = pod["containers"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        mount = mounts[KAFKA_MOUNT]
        assert mount["readOnly"] is True
        source = volumes[mount["name"]]["secret"]
        assert source["secretName"] == "runtrail-kafka"
        files = {item["path"]: item["key"] for item in source["items"]}
        assert set(files.values()) <= set(secret)
        env = {e["name"]: e.get("value") for e in container["env"]}
        files_json = json.loads(env["RUNTRAIL_KAFKA_OPTION_FILES"])
        option_files = Settings(kafka_option_files=files_json)
        password = option_files.kafka_option_files["sasl.password"]
        assert password == Path(f"{KAFKA_MOUNT}/password") and files["password"] == "password"
        assert not any("PASSWORD" in name for name in env)
    options = json.loads(config["RUNTRAIL_KAFKA_OPTIONS"])
    assert options["security.protocol"] == "SASL_SSL"
    assert options["sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["ssl.ca.location"] == f"{KAFKA_MOUNT}/ca.crt"
    assert not any("password" in key for key in options)


def test_keda_reads_the_lag_with_the_same_credentials(objects: list[dict[str, Any]]) -> None:
    try:
        from cloudcoil.models.keda.v1alpha1 import TriggerAuthentication
    except ModuleNotFoundError:
        missing("cloudcoil-models-keda (dev extra)")
    (auth,) = of_kind(objects, "TriggerAuthentication").values()
    model = TriggerAuthentication.model_validate(auth)
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == auth
    secret = of_kind(objects, "Secret")["runtrail-kafka"]["stringData"]
    refs = {r["parameter"]: r for r in auth["spec"]["secretTargetRef"]}
    assert set(refs) == {"sasl", "username", "password", "tls", "ca"}
    for ref in refs.values():
        assert ref["name"] == "runtrail-kafka" and ref["key"] in secret
    assert secret["sasl"] == "scram_sha512" and secret["tls"] == "enable"
    bootstrap = of_kind(objects, "ConfigMap")["runtrail-settings"]["data"][
        "RUNTRAIL_BOOTSTRAP_SERVERS"
    ]
    for scaled in of_kind(objects, "ScaledObject").values():
        (trigger,) = scaled["spec"]["triggers"]
        assert trigger["authenticationRef"] == {"name": auth["metadata"]["name"]}
        assert trigger["metadata"]["bootstrapServers"] == bootstrap


def test_topics_are_ensured_at_three_replicas(objects: list[dict[str, Any]]) -> None:
    config = of_kind(objects, "ConfigMap")["runtrail-settings"]["data"]
    assert config["RUNTRAIL_REPLICATION_FACTOR"] == "3"  # so min.insync.replicas 2 (ensure)
    job = of_kind(objects, "Job")["runtrail-topics"]["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["topics", "ensure"]
    assert job["restartPolicy"] == "OnFailure"
