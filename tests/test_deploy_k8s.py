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

from pathlib import Path
from typing import Any

import pytest
import yaml

from runtrail.config import Settings
from runtrail.runtime.registry import SERVICES
from runtrail_tools.devstack.ports import plan_ports
from runtrail_tools.devstack.service_settings import importable, settings_info
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
    config = of_kind(objects, "ConfigMap")["runtrail-settings"]["data"]
    secret = of_kind(objects, "Secret")["runtrail-secrets"]["stringData"]
    for key in [*config, *secret]:
        assert key in known or not key.startswith("RUNTRAIL_"), key
    assert "RUNTRAIL_BOOTSTRAP_SERVERS" in config
    assert not any("TOKEN" in key for key in config)  # tokens are secrets
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
