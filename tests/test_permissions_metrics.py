"""``RUNTRAIL_METRICS_TOKEN``: /metrics (and health, unless opened) need the bearer token.

A real :class:`ServiceRunner` on the real broker, so the setting is wired where services
start, not only in the endpoint class.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence

import pytest

from runtrail.config import Settings
from runtrail.runtime import Delivered, Service
from runtrail.runtime.runner import ServiceRunner
from runtrail_tools.devstack.prometheus import scrape_config
from runtrail_tools.devstack.scrape import fetch, ready
from tests.support import create_topic, unique_topic, wait_for

pytestmark = pytest.mark.kafka
TOKEN = "metrics-token-7f3a"


class Idle(Service):
    name = "idle"

    def process(self, batch: Sequence[Delivered]) -> None:
        pass


def status(port: int, path: str, token: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (TimeoutError, urllib.error.URLError):
        return 0  # no answer (yet): a loaded machine may keep a starting service from answering


def running(bootstrap: str, **settings: object) -> Iterator[ServiceRunner]:
    topic = create_topic(bootstrap, unique_topic("metrics-auth"), partitions=1)
    create_topic(bootstrap, f"{topic}.dlq", partitions=1)
    s = Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        group=f"g-{topic}",
        batch_timeout_ms=100,
        **settings,  # type: ignore[arg-type]
    )
    runner = ServiceRunner(Idle, s, service_name="idle", metrics_port=0)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        runner.request_stop()
        thread.join(30)


@pytest.fixture
def guarded(kafka_bootstrap: str) -> Iterator[ServiceRunner]:
    yield from running(kafka_bootstrap, metrics_token=TOKEN)


def test_metrics_and_health_need_the_token(guarded: ServiceRunner) -> None:
    port = guarded.metrics_port
    wait_for(lambda: status(port, "/readyz", TOKEN) == 200, 30, what="readiness")
    for path in ("/metrics", "/healthz", "/readyz"):
        assert status(port, path) == 401
        assert status(port, path, "wrong-token") == 401
        assert status(port, path, TOKEN) == 200
    assert status(port, "/nope", TOKEN) == 404


@pytest.fixture
def health_open(kafka_bootstrap: str) -> Iterator[ServiceRunner]:
    yield from running(kafka_bootstrap, metrics_token=TOKEN, metrics_health_open=True)


def test_health_can_be_left_open_for_probes(health_open: ServiceRunner) -> None:
    port = health_open.metrics_port
    wait_for(lambda: status(port, "/readyz") == 200, 30, what="readiness")
    assert status(port, "/healthz") == 200
    assert status(port, "/metrics") == 401
    assert status(port, "/metrics", TOKEN) == 200


def test_dev_tools_and_prometheus_config_send_the_token(
    guarded: ServiceRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = guarded.metrics_port
    wait_for(lambda: status(port, "/readyz", TOKEN) == 200, 30, what="readiness")
    assert fetch(f"http://127.0.0.1:{port}/metrics") is None and not ready(port)
    monkeypatch.setenv("RUNTRAIL_METRICS_TOKEN", TOKEN)
    assert fetch(f"http://127.0.0.1:{port}/metrics") is not None and ready(port)
    services, agents = scrape_config({"idle": f"127.0.0.1:{port}"}, {}, token=TOKEN)[
        "scrape_configs"
    ]
    assert services["authorization"] == {"type": "Bearer", "credentials": TOKEN}
    assert "authorization" not in agents  # the demo agent's endpoint takes no token
    assert all("authorization" not in j for j in scrape_config({}, {})["scrape_configs"])


def body(port: int, path: str, token: str | None = None) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as exc:
        return str(exc.read().decode())


def test_open_readiness_names_no_store_error_without_the_token(
    health_open: ServiceRunner,
) -> None:
    """What a service waits for (an error text with paths and hosts) is for the token holder."""
    port = health_open.metrics_port
    wait_for(lambda: status(port, "/readyz") == 200, 30, what="readiness")
    health_open.health.unavailable["capture sink file:///secret/path"] = "disk full"
    assert status(port, "/readyz") == 503
    assert body(port, "/readyz") == "not ready\n"
    assert "/secret/path" in body(port, "/readyz", TOKEN)
