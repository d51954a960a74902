"""How many messages the runtime takes per consume call: the service's own unless
``RUNTRAIL_BATCH_SIZE`` says otherwise.

Small batches keep a batch's events in the CPU caches while the service works on them
(capture ran at about twice the rate at 250 as at 2000); sessions, whose checkpoints are
made durable once per batch, keeps large ones, which the runtime still hands to the service
250 at a time (docs/PERFORMANCE.md, *Chunks that fit the CPU caches*).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.runtime import Service
from runtrail.runtime.runner import ServiceRunner
from runtrail_services.capture.service import CaptureService
from runtrail_services.noop.service import NoopService
from runtrail_services.sessions.service import SessionsService


class AskedConsumer:
    """Stands in for the Kafka consumer: remembers how many messages each consume asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.asked.append(num_messages)
        return []


def _asked(factory: type[Service], settings: Settings, options: dict[str, str]) -> int:
    runner = ServiceRunner(
        factory, settings, service_name=factory.name, options=options, metrics_port=0
    )
    try:
        runner._consumer.close()
        consumer = AskedConsumer()
        runner._consumer = consumer  # type: ignore[assignment]
        runner._step()
        return consumer.asked[-1]
    finally:
        runner.service.close()
        runner._http._server.server_close()  # bound, never started


@pytest.mark.parametrize(
    ("factory", "options", "expected"),
    [
        (NoopService, {}, 250),
        (CaptureService, {"sink_url": "memory://"}, 250),
        (SessionsService, {"http_port": "0"}, 2000),
    ],
)
def test_the_service_says_how_many(
    tmp_path: Path, factory: type[Service], options: dict[str, str], expected: int
) -> None:
    settings = Settings(bootstrap_servers="127.0.0.1:9", state_dir=tmp_path)
    assert factory.batch_size == expected
    assert _asked(factory, settings, options) == expected


def test_the_setting_overrides_the_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNTRAIL_BATCH_SIZE", "77")
    settings = Settings(bootstrap_servers="127.0.0.1:9", state_dir=tmp_path)
    assert settings.batch_size == 77
    assert _asked(SessionsService, settings, {"http_port": "0"}) == 77
    assert _asked(NoopService, settings, {}) == 77
