"""The publisher replaces a Kafka client that has lost every broker for good, and only that one.

A librdkafka client was caught dropping its last broker during a broker's stop without a
re-bootstrap (``runtrail/kafka/orphan_watch.py``); with no broker left it never reaches the
cluster again, and an agent's events would wait in the spool until the process restarts. The
drain gives such a client a successor. That state cannot be made to order, so its verdict is
stood in for (``tests/orphan_support.py``) after an ordinary outage has shown that the real
client's statistics do not call for one: against a real broker SIGKILLed, the client is
replaced once (and once more for each successor a fatal error ends, as one bootstrapping
against the broker still starting up can be), publishing never blocks, and once the broker is
back every event is on the topic once, each run in order.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtrail.publisher import Publisher
from runtrail_tools.kafka.broker import LocalBroker
from tests.orphan_support import Orphaned
from tests.publisher_support import agent_settings, assert_in_order, contents
from tests.support import create_topic, unique_topic, wait_for
from tests.test_publisher_outage import SteadyAgent
from tests.test_runtime_outage import _kill

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_a_client_that_lost_every_broker_is_replaced_and_nothing_is_lost_or_doubled(
    tmp_path: Path, restartable_broker: LocalBroker, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("replaced"), partitions=3)
    settings = agent_settings(bootstrap, topic, tmp_path / "spool", delivery_timeout_ms=3000)
    registry = CollectorRegistry()
    runs = [f"run-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    publisher = Publisher(settings, retry_backoff_s=0.2, retry_backoff_max_s=1.0, registry=registry)
    try:
        with SteadyAgent(publisher, runs) as agent:
            time.sleep(1.0)
            _kill(restartable_broker)
            wait_for(lambda: publisher.stats().spooling, 30, what="the spool to take the events")
            time.sleep(15.0)  # past ORPHANED_AFTER_S: the real client still knows its broker
            assert publisher.stats().client_replacements == 0, "a client replaced in an outage"
            verdict = Orphaned()
            publisher._drain._sender.orphan = verdict
            wait_for(lambda: verdict.replaced, 30, what="the orphaned client to be replaced")
            assert publisher.stats().client_replacements == 1
            restartable_broker.start()
            time.sleep(2.0)  # publishing goes on while the spool drains
        assert publisher.drain(120), f"spool not drained: {publisher.stats()}"
        stats = publisher.stats()
    finally:
        publisher.close(timeout=20)
    published, slowest = agent.published, agent.slowest
    assert stats.spooled > 0, stats
    # the new client may meet the broker still starting up and be ended by a fatal error
    # (tests/test_producer_fatal.py): it is replaced too, and said so
    fatal = sum("a fatal error ended" in r.getMessage() for r in caplog.records)
    assert stats.client_replacements == 1 + fatal, stats
    assert registry.get_sample_value("runtrail_publisher_client_replacements_total") == (
        stats.client_replacements
    )
    assert slowest < 2.0, f"publish() blocked for {slowest:.2f} s"
    found = contents(bootstrap, topic, len(published))
    assert set(found.counts) == set(published), "events missing or unexpected"
    assert not found.doubled, found.doubled
    assert_in_order(found)
    assert len(found.per_run) == len(runs)
