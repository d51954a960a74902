"""Issues 11.4 (limits at publish) and 12.1 (sequences per tenant), against a real broker.

Through ``Publisher.publish``: NaN/Infinity, nesting beyond ``max_json_depth`` and events over
``max_event_bytes`` are rejected with their reason (never raised into the agent), the events
after them are still sent, and a legal 5 MB model response goes through.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.publisher import Publisher
from runtrail_tools.kafka.broker import LocalBroker
from tests.publisher_support import contents
from tests.support import create_topic, unique_topic

pytestmark = pytest.mark.kafka


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def settings(tmp_path: Path, bootstrap: str, topic: str) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap, spool_dir=tmp_path / "spool", tenant="t1", events_topic=topic
    )


def test_limits_reject_with_a_reason_and_the_rest_is_sent(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory(2, config={"max.message.bytes": str(10 << 20)})
    size = 5 << 20  # a 5 MB model response, incompressible
    big = base64.b64encode(os.urandom(size * 3 // 4 + 3)).decode()[:size]
    assert len(big) == size
    with Publisher(settings(tmp_path, kafka_bootstrap, topic)) as pub:
        legal = [pub.publish("MODEL_REASONING", "r", {"text": "canary 0"})]
        assert pub.publish("TOOL_CALL", "r", {"arguments": {"x": float("inf")}}) is None
        legal.append(pub.publish("MODEL_REASONING", "r", {"text": "canary 1"}))
        nan = pub.submit({"runId": "r", "type": "TOOL_CALL", "data": {"arguments": [float("nan")]}})
        assert (nan.reason, nan.accepted) == ("non-finite", False)
        assert "data.arguments[0]" in str(nan.detail)
        deep = pub.submit({"runId": "r", "type": "TOOL_CALL", "data": {"arguments": nested(250)}})
        assert deep.reason == "too-deep" and "128" in str(deep.detail), deep
        deeper = pub.submit(
            {"runId": "r", "type": "TOOL_CALL", "data": {"arguments": nested(5000)}}
        )
        assert deeper.reason == "too-deep", deeper
        legal.append(pub.publish("MODEL_RESPONSE", "r", {"message": big}))  # 5 MB: legal
        huge = pub.submit({"runId": "r", "type": "MODEL_RESPONSE", "data": {"message": big * 2}})
        assert huge.reason == "too-large" and "RUNTRAIL_MAX_EVENT_BYTES" in str(huge.detail)
        legal.append(pub.publish("MODEL_REASONING", "r", {"text": "canary 2"}))
        assert all(legal), legal
        assert pub.flush(60) == 0
        stats = pub.stats()
    assert (stats.rejected, stats.sent) == (5, 4)
    found = contents(kafka_bootstrap, topic, 4)
    assert [e.event_id for e in found.events] == legal
    assert found.per_run[("t1", "r")] == [1, 2, 3, 4]  # rejected events used no sequence
    assert found.events[2].data.model_dump()["message"] == big


def test_sequences_are_per_tenant_and_run(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory(1)
    with Publisher(settings(tmp_path, kafka_bootstrap, topic)) as pub:
        for _ in range(3):
            for tenant in ("acme", "globex"):
                assert pub.publish("STEP_END", "r", {}, tenant_id=tenant) is not None
        pub.set_next_sequence("r", 10, tenant_id="acme")  # resumes acme's r only
        assert pub.publish("STEP_END", "r", {}, tenant_id="acme")
        assert pub.publish("STEP_END", "r", {}, tenant_id="globex")
        pub.set_next_sequence("r", 7)  # the publisher's own tenant
        assert pub.publish("STEP_END", "r", {})
        assert pub.flush(30) == 0
    found = contents(kafka_bootstrap, topic, 9)
    assert dict(found.per_run) == {
        ("acme", "r"): [1, 2, 3, 10],
        ("globex", "r"): [1, 2, 3, 4],
        ("t1", "r"): [7],
    }


def test_events_beside_one_the_topic_refuses_as_too_large_are_sent(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    """A topic whose ``max.message.bytes`` is below the publisher's own limit refuses a whole
    produce batch, and librdkafka reports the size error for every event in it: only the
    large one may be rejected, the canaries beside it must land, in order."""
    topic = kafka_topic_factory(1, config={"max.message.bytes": "4000"})
    big = base64.b64encode(os.urandom(6000)).decode()  # incompressible, under the publisher's limit
    with Publisher(settings(tmp_path, kafka_bootstrap, topic)) as pub:
        first = pub.publish("MODEL_REASONING", "r", {"text": "canary 0"})
        assert pub.publish("MODEL_RESPONSE", "r", {"message": big})  # accepted: the broker decides
        last = pub.publish("MODEL_REASONING", "r", {"text": "canary 1"})
        assert pub.drain(60), f"spool not drained: {pub.stats()}"
        stats = pub.stats()
    assert (stats.rejected, stats.sent, stats.dropped) == (1, 2, 0)
    found = contents(kafka_bootstrap, topic, 2)
    assert [e.event_id for e in found.events] == [first, last]


def test_after_an_outage_the_spool_of_a_closed_agent_sends_the_events_beside_a_refused_one(
    tmp_path: Path, restartable_broker: LocalBroker
) -> None:
    """The same refusal met by the next agent on the spool: the first published with the
    broker stopped and closed with everything unsent; the next one drains the spool once the
    broker is back, sends the canaries and rejects only the large event."""
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(
        bootstrap, unique_topic("small"), partitions=1, **{"max.message.bytes": "4000"}
    )
    big = base64.b64encode(os.urandom(6000)).decode()
    restartable_broker.stop()
    with Publisher(settings(tmp_path, bootstrap, topic), retry_backoff_s=0.2) as first_agent:
        first = first_agent.publish("MODEL_REASONING", "r", {"text": "canary 0"})
        assert first_agent.publish("MODEL_RESPONSE", "r", {"message": big})
        last = first_agent.publish("MODEL_REASONING", "r", {"text": "canary 1"})
        first_agent.close(timeout=1.0)  # nothing reaches a stopped broker: all stay spooled
    restartable_broker.start()
    with Publisher(settings(tmp_path, bootstrap, topic), retry_backoff_s=0.2) as next_agent:
        assert next_agent.drain(90), f"spool not drained: {next_agent.stats()}"
        stats = next_agent.stats()
    assert (stats.rejected, stats.sent, stats.dropped) == (1, 2, 0)
    found = contents(bootstrap, topic, 2)
    assert [e.event_id for e in found.events] == [first, last]
