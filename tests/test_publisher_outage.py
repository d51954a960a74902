"""Issue 11.2: per-run order survives a broker outage under steady publishing (real broker).

The outage is a little longer than the delivery timeout: long enough that the first events
time out, short enough that later ones would still be queued in librdkafka when the broker is
back. Before the fix those later events were delivered before the spooled ones.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from runtrail.publisher import Publisher
from runtrail_tools.kafka.broker import LocalBroker
from tests.publisher_support import agent_settings, assert_in_order, contents
from tests.support import create_topic, unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DELIVERY_TIMEOUT_MS = 10000


class SteadyAgent:
    """Publishes to a few runs every few milliseconds from its own thread, as an agent would."""

    def __init__(self, publisher: Publisher, runs: list[str]) -> None:
        self.publisher = publisher
        self.runs = runs
        self.published: dict[str, str] = {}
        self.slowest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> SteadyAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        i = 0
        while not self._stop.is_set():
            run = self.runs[i % len(self.runs)]
            started = time.monotonic()
            event_id = self.publisher.publish("MODEL_REASONING", run, {"text": f"thought {i}"})
            self.slowest = max(self.slowest, time.monotonic() - started)
            assert event_id is not None
            self.published[event_id] = run
            i += 1
            time.sleep(0.003)


def test_per_run_order_survives_an_outage_under_steady_publishing(
    tmp_path: Path, restartable_broker: LocalBroker
) -> None:
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("outage"), partitions=3)
    settings = agent_settings(
        bootstrap, topic, tmp_path / "spool", delivery_timeout_ms=DELIVERY_TIMEOUT_MS
    )
    runs = [f"run-{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    publisher = Publisher(settings, retry_backoff_s=0.2, retry_backoff_max_s=1.0)
    try:
        with SteadyAgent(publisher, runs) as agent:
            time.sleep(2.0)
            down = time.monotonic()
            restartable_broker.stop()
            # away for longer than the delivery timeout whatever the start takes (1-9 s here)
            time.sleep(max(0.0, DELIVERY_TIMEOUT_MS / 1000 * 1.2 - (time.monotonic() - down)))
            restartable_broker.start()
            outage = time.monotonic() - down
            print(f"outage {outage:.1f} s, delivery timeout {DELIVERY_TIMEOUT_MS / 1000:g} s")
            time.sleep(3.0)  # publishing goes on while the spool drains
        assert publisher.drain(120), f"spool not drained: {publisher.stats()}"
        stats = publisher.stats()
    finally:
        publisher.close(timeout=20)
    published = agent.published
    assert stats.spooled > 0, f"the outage ({outage:.1f} s) sent nothing to the spool: {stats}"
    assert agent.slowest < 2.0, f"publish() blocked for {agent.slowest:.2f} s"
    found = contents(bootstrap, topic, len(published))
    assert set(found.counts) == set(published), "events missing or unexpected"
    assert not found.doubled, found.doubled
    assert_in_order(found)
    assert len(found.per_run) == len(runs)
