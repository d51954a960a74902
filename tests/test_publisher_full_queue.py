"""A full local producer queue (the broker slower than the agent, not gone), on the real broker.

``publish`` waits up to ``publish_max_block_ms`` for room in librdkafka's queue, serving
delivery reports meanwhile; past it, events go through the write-ahead spool instead of the
agent stalling. Either way every event reaches the topic once, each run in sequence order.
The queue is made small (``queue.buffering.max.messages`` 20) so that a tight loop fills it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtrail.publisher import Publisher
from tests.publisher_support import agent_settings, assert_in_order, contents
from tests.support import create_topic, unique_topic

pytestmark = pytest.mark.kafka

EVENTS = 3000
RUNS = 7


@pytest.mark.parametrize(("block_ms", "through_spool"), [(5000, False), (0, True)])
def test_a_full_local_queue_waits_for_room_or_spools_and_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path, block_ms: int, through_spool: bool
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("fullq"), partitions=3)
    settings = agent_settings(
        kafka_bootstrap,
        topic,
        tmp_path / "spool",
        publish_max_block_ms=block_ms,
        kafka_options={"queue.buffering.max.messages": "20"},
    )
    with Publisher(settings) as publisher:
        ids = [
            publisher.publish("MODEL_REASONING", f"run-{i % RUNS}", {"text": f"thought {i}"})
            for i in range(EVENTS)
        ]
        assert publisher.drain(60), "the spool did not drain"
        assert publisher.flush(60) == 0
        stats = publisher.stats()
    assert None not in ids
    assert stats.sent == EVENTS and stats.rejected == 0 and stats.dropped == 0, stats
    # which way the events went: waiting for room, or through the spool once it stayed full
    assert (stats.spooled > 0) == through_spool, stats
    found = contents(kafka_bootstrap, topic, EVENTS)
    assert set(found.counts) == set(ids), "events missing from the topic"
    assert not found.doubled
    assert_in_order(found)
