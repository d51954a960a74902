"""Debian's real ``prometheus`` scrapes the running services after a known workload.

``DevStack`` runs every registered service (each its own process) and Prometheus (loopback,
free port, temporary TSDB, 1 s scrapes, the alert rules of deploy/prometheus loaded). The test
publishes N valid events through the Publisher — whose metrics it serves on the stack's agent
port, like the demo — and K undecodable messages, then asks Prometheus's HTTP query API for
each service's series: processed N, consumed N+K, dead-lettered K as ``undecodable``, up, no
lag; the publisher's sent N and an empty spool; the dead-letter alert pending on real series.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from runtrail.config import Settings
from runtrail.publisher import Publisher
from runtrail.runtime.registry import SERVICES
from runtrail_tools.devstack.catchup import wait_caught_up
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import DevStack, StackOptions
from runtrail_tools.devstack.state import StackState
from runtrail_tools.kafka.ports import free_ports
from tests.kafka_fixture import services_required
from tests.support import produce, stack_settings

pytestmark = [pytest.mark.kafka]
RUNS, EVENTS_PER_RUN, POISON = 4, 10, 3


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[DevStack, StackState]]:
    if shutil.which("prometheus") is None:
        message = "the prometheus binary is not installed (Debian: prometheus)"
        if services_required():
            pytest.fail(message)
        pytest.skip(message)
    prefix = f"prom-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        tmp_path / "state",
        prefix,
        partitions=3,
    )
    options = StackOptions(
        port_base=find_free_base(SERVICES),
        # the consumer services only: the series checked below are their consumers' (the
        # receivers, which dev up also runs by default, consume nothing)
        services=list(SERVICES),
        manage_broker=False,
        group_prefix=prefix,
        prometheus=True,
        prometheus_port=free_ports(1)[0],
        scrape_interval="1s",
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        yield dev, dev.up()
    finally:
        assert dev.down() == []


def query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def by_service(port: int, promql: str, label: str = "service") -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in query(port, promql)}


def eventually(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def workload(settings: Settings, registry: CollectorRegistry) -> int:
    """RUNS runs of EVENTS_PER_RUN runtime events; returns how many were published."""
    with Publisher(settings, registry=registry) as publisher:
        for r in range(RUNS):
            run = f"prom-run-{r}"
            for step in range(1, EVENTS_PER_RUN // 5 + 1):
                coords: dict[str, Any] = {"turn_id": "t1", "step": step}
                publisher.publish("MODEL_REQUEST", run, {"prompt": {"q": step}}, **coords)
                publisher.publish("MODEL_RESPONSE", run, {"message": "ok", "raw": None}, **coords)
                call = {"callId": f"c{step}", "toolName": "search"}
                publisher.publish("TOOL_CALL", run, {**call, "arguments": {"q": step}}, **coords)
                publisher.publish("TOOL_RESULT", run, {**call, "output": [step]}, **coords)
                publisher.publish("STEP_END", run, {"reason": "tool_use"}, **coords)
        assert publisher.flush(30) == 0
    return RUNS * EVENTS_PER_RUN


def test_prometheus_scrapes_the_services_with_the_right_values(
    stack: tuple[DevStack, StackState], tmp_path: Path
) -> None:
    dev, state = stack
    assert state.prometheus is not None
    port = state.prometheus.metrics_port
    settings = dev.settings.model_copy(
        update={"bootstrap_servers": state.bootstrap_servers, "spool_dir": tmp_path / "spool"}
    )
    registry = CollectorRegistry()
    server, _ = start_http_server(state.agent_port, "127.0.0.1", registry)
    try:
        sent = workload(settings, registry)
        produce(state.bootstrap_servers, settings.events_topic,
                ((f"poison-{i}", b"not an avro event") for i in range(POISON)))  # fmt: skip
        groups = {name: record.group or "" for name, record in state.services.items()}
        assert set(
            wait_caught_up(settings, groups, settings.events_topic, timeout=120).values()
        ) == {0}
        services = set(state.services)

        def scraped() -> None:
            assert by_service(
                port, 'up{job="runtrail-services"}', "runtrail_service"
            ) == dict.fromkeys(services, 1.0)
            assert by_service(port, "runtrail_processed_total") == dict.fromkeys(services, sent)
            assert by_service(port, "runtrail_consumed_total") == dict.fromkeys(
                services, sent + POISON
            )
            assert by_service(
                port, 'runtrail_dead_lettered_total{reason="undecodable"}'
            ) == dict.fromkeys(services, POISON)
            assert by_service(port, "runtrail_service_up") == dict.fromkeys(services, 1.0)
            assert by_service(port, "sum by (service) (runtrail_consumer_lag)") == dict.fromkeys(
                services, 0.0
            )
            agent = query(
                port, 'runtrail_publisher_events_total{job="runtrail-agents",outcome="sent"}'
            )
            assert [float(r["value"][1]) for r in agent] == [sent]
            depth = query(port, 'runtrail_publisher_spool_depth{job="runtrail-agents"}')
            assert [float(r["value"][1]) for r in depth] == [0.0]  # fmt: skip

        eventually(scraped, timeout=90)
        # service-specific series of the services that export them, from the same scrape
        if "capture" in services:
            nodes = by_service(
                port, "sum by (node_type) (runtrail_capture_records_total)", "node_type"
            )
            assert nodes == {"MODEL": RUNS * EVENTS_PER_RUN / 5, "TOOL": RUNS * EVENTS_PER_RUN / 5}
        if "audit" in services:
            assert by_service(port, "runtrail_audit_links_sealed_total") == {"audit": sent}
        if "projector" in services:
            assert by_service(port, "runtrail_projection_halted_runs") == {"projector": 0.0}

        # the alert rules are loaded and evaluated against these very series
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5) as r:
            groups_loaded = json.loads(r.read())["data"]["groups"]
        rules = [rule for g in groups_loaded for rule in g["rules"]]
        assert rules and all(rule["health"] == "ok" for rule in rules)
        eventually(lambda: _assert_alerting(port, services), timeout=60)
    finally:
        server.shutdown()


def _assert_alerting(port: int, services: set[str]) -> None:
    alerts = by_service(port, 'ALERTS{alertname="RuntrailDeadLetters"}')
    assert set(alerts) == services, alerts
