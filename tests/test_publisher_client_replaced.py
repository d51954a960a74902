"""The publisher replaces a Kafka client that reaches no broker while the spool waits.

A librdkafka client was caught dropping its last broker during a broker's stop without a
re-bootstrap (``docs/OUTAGES.md``); with no broker left it never reaches the cluster again, and
an agent's events would wait in the spool until the process restarts. The drain makes a new
client once its probes have failed for ``REPLACE_UNREACHABLE_AFTER_S``. That state cannot be
made to order, so this proves what can be: against a real broker SIGKILLed for longer than the
threshold, the client is replaced (again each period while the broker is away), publishing
never blocks, and once the broker is back every event is on the topic once, each run in order.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

import runtrail.publisher.drain as drain
from runtrail.config import Settings
from runtrail.publisher import Publisher
from runtrail_tools.kafka.broker import LocalBroker
from tests.publisher_support import assert_in_order, contents
from tests.support import create_topic, unique_topic, wait_for
from tests.test_runtime_outage import _kill

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

#: the threshold in this test (30 s in use)
REPLACE_AFTER_S = 3.0


def test_a_client_that_reaches_no_broker_is_replaced_and_nothing_is_lost_or_doubled(
    tmp_path: Path, restartable_broker: LocalBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain, "REPLACE_UNREACHABLE_AFTER_S", REPLACE_AFTER_S)
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("replaced"), partitions=3)
    settings = Settings(
        bootstrap_servers=bootstrap,
        spool_dir=tmp_path / "spool",
        tenant="t1",
        events_topic=topic,
        delivery_timeout_ms=3000,
    )
    registry = CollectorRegistry()
    runs = [f"run-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    published: dict[str, str] = {}
    slowest = 0.0
    stop = threading.Event()
    publisher = Publisher(settings, retry_backoff_s=0.2, retry_backoff_max_s=1.0, registry=registry)

    def agent() -> None:
        nonlocal slowest
        i = 0
        while not stop.is_set():
            run = runs[i % len(runs)]
            started = time.monotonic()
            event_id = publisher.publish("MODEL_REASONING", run, {"text": f"thought {i}"})
            slowest = max(slowest, time.monotonic() - started)
            assert event_id is not None
            published[event_id] = run
            i += 1
            time.sleep(0.01)

    thread = threading.Thread(target=agent, daemon=True)
    try:
        thread.start()
        time.sleep(1.0)
        _kill(restartable_broker)
        wait_for(
            lambda: publisher.stats().client_replacements >= 2,
            4 * REPLACE_AFTER_S + 30,
            what="the unreachable client to be replaced twice",
        )
        restartable_broker.start()
        time.sleep(2.0)  # publishing goes on while the spool drains
        stop.set()
        thread.join(10)
        assert publisher.drain(120), f"spool not drained: {publisher.stats()}"
        stats = publisher.stats()
    finally:
        stop.set()
        publisher.close(timeout=20)
    assert stats.spooled > 0, stats
    assert registry.get_sample_value("runtrail_publisher_client_replacements_total") == (
        stats.client_replacements
    )
    assert slowest < 2.0, f"publish() blocked for {slowest:.2f} s"
    found = contents(bootstrap, topic, len(published))
    assert set(found.counts) == set(published), "events missing or unexpected"
    assert not found.doubled, found.doubled
    assert_in_order(found)
    assert len(found.per_run) == len(runs)
