"""deploy/prometheus and deploy/grafana: the rules pass promtool (syntax and unit tests), every
metric an alert or a dashboard panel names is one the code exports, and the scrape configs
match the local stack's port table."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from runtrail.runtime.registry import SERVICES
from runtrail_tools.devstack import prometheus as prom
from runtrail_tools.devstack.ports import plan_ports
from runtrail_tools.devstack.service_settings import importable, service_package
from tests.kafka_fixture import services_required

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "runtrail.json"
#: Series Prometheus makes itself.
BUILTIN = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian: prometheus)"
        if services_required():
            pytest.fail(message)
        pytest.skip(message)
    return found


def exported_metric_names() -> set[str]:
    """Every series name the code can export: the runtime's, the publisher's, and those of
    each registered service's metrics classes (found generically, so new services count)."""
    from runtrail.publisher.metrics import PublisherMetrics
    from runtrail.runtime.metrics import RuntimeMetrics

    registry = CollectorRegistry()
    RuntimeMetrics("x", registry)
    PublisherMetrics(registry)
    for name in SERVICES:
        if not importable(name):
            continue
        try:
            module = importlib.import_module(f"{service_package(name)}.metrics")
        except ModuleNotFoundError:
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            params = list(inspect.signature(cls).parameters)
            if params[:2] == ["service", "registry"]:
                cls(name, registry)
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        elif family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count", "created")}
        else:
            names.add(family.name)
    return names


def used_names(expression: str) -> set[str]:
    """Metric names in a PromQL expression (label names and functions are not runtrail_*)."""
    return set(re.findall(r"\b(runtrail_[a-z0-9_]+)\b", expression))


def alert_expressions() -> dict[str, str]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    tool = promtool()
    check = subprocess.run(
        [tool, "check", "rules", str(PROMETHEUS / "alerts.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        [tool, "test", "rules", "tests/alerts_test.yml"],
        capture_output=True,
        text=True,
        cwd=PROMETHEUS,
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert "SUCCESS" in unit.stdout


def test_the_required_alerts_exist() -> None:
    alerts = alert_expressions()
    wanted = {
        "RuntrailConsumerLagGrowing": "runtrail_consumer_lag",
        "RuntrailDeadLetters": "runtrail_dead_lettered_total",
        "RuntrailDeadLetterLimitTripped": "runtrail_dlq_limit_tripped",
        "RuntrailAuditChainConflict": "runtrail_audit_events_refused_total",
        "RuntrailProjectionHalted": "runtrail_projection_halted_runs",
        "RuntrailPublisherSpoolNotDraining": "runtrail_publisher_spool_depth",
    }
    for alert, metric in wanted.items():
        assert metric in used_names(alerts[alert]), alert


def test_every_metric_an_alert_or_panel_uses_exists_in_the_code() -> None:
    known = exported_metric_names()
    assert "runtrail_processed_total" in known and "runtrail_publisher_spool_depth" in known
    for alert, expression in alert_expressions().items():
        assert used_names(expression) <= known, (alert, used_names(expression) - known)
    expressions = dashboard_expressions()
    assert len(expressions) >= 20
    for expression in expressions:
        assert used_names(expression), expression
        assert used_names(expression) <= known, (expression, used_names(expression) - known)


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"
            assert all(t["refId"] for t in panel["targets"])


def test_the_local_scrape_config_is_the_dev_stacks_rendering_for_the_default_ports() -> None:
    static = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    plan = plan_ports(list(SERVICES))
    rendered = prom.scrape_config(
        {name: f"127.0.0.1:{port}" for name, port in plan.metrics.items()},
        {"demo": f"127.0.0.1:{plan.agent}"},
        interval="15s",
        rule_files=["alerts.yml"],
    )
    assert static == rendered


def test_the_compose_scrape_config_has_the_same_jobs_and_ports_with_compose_hosts() -> None:
    local = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    compose = yaml.safe_load((PROMETHEUS / "prometheus.compose.yml").read_text())
    for lj, cj in zip(local["scrape_configs"], compose["scrape_configs"], strict=True):
        assert lj["job_name"] == cj["job_name"]
        for ls, cs in zip(lj["static_configs"], cj["static_configs"], strict=True):
            assert ls["labels"] == cs["labels"]
            name = next(iter(ls["labels"].values()))
            port = ls["targets"][0].rsplit(":", 1)[1]
            assert cs["targets"] == [f"{name}:{port}"]
    tool = promtool()
    for path, flags in ((PROMETHEUS / "prometheus.yml", []), (PROMETHEUS / "prometheus.compose.yml", ["--syntax-only"])):  # fmt: skip
        check = subprocess.run([tool, "check", "config", *flags, str(path)], capture_output=True, text=True)  # fmt: skip
        assert check.returncode == 0, check.stdout + check.stderr
