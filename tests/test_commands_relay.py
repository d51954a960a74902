"""The outbox relay puts every appended event on the topic exactly once, in per-run order,
even when it is SIGKILLed again and again under load (real Kafka, real PostgreSQL)."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from runtrail.commands import EventStore
from runtrail.commands.relay import OUTBOX_HEADER, OutboxRelay, _Batch
from runtrail.events import EventCodec
from runtrail.persistence import COMMAND_EVENTS, open_store
from tests.commands_support import StoreBackend, accept, command
from tests.commands_support import command_backend as command_backend  # (a fixture)
from tests.kafka_fixture import TopicFactory
from tests.support import ServiceProcess, consume_all, wait_for

RUNS = 6


def _relay(store: EventStore, bootstrap: str, topic: str, **options: Any) -> OutboxRelay:
    return OutboxRelay(
        store,
        topic,
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"},
        {"bootstrap.servers": bootstrap},
        transactional_id=f"relay-{topic}",
        **options,
    )


def _write(store: EventStore, run: str, count: int, pause: float = 0.0) -> None:
    """``count`` events on ``run``: accepted, then budget reservations."""
    assert store.execute(accept(run)).accepted
    for version in range(1, count):
        data = {"budgetId": "b", "amount": 1.0, "unit": "usd"}
        assert store.execute(command("reserve_budget", run, version, data)).accepted
        if pause:
            time.sleep(pause)


def _sequences_on_topic(bootstrap: str, topic: str, expect: int) -> dict[str, list[int]]:
    """Per run, the sequences of the relayed events in topic order (read committed)."""
    codec = EventCodec()
    messages = consume_all(bootstrap, topic, expect=expect + 1, timeout=15)
    out: dict[str, list[int]] = defaultdict(list)
    for msg in messages:
        event = codec.decode(msg.value()).event
        assert dict(msg.headers())[OUTBOX_HEADER] == str(event.sequence).encode()
        assert msg.key() == event.run_id.encode()
        out[event.run_id].append(event.sequence)
    return out


def test_the_relay_publishes_each_appended_event_once_in_order(
    command_backend: StoreBackend, kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory(3)
    store = command_backend.open()
    for i in range(RUNS):
        _write(store, f"run-{i}", 5)
    relay = _relay(store, kafka_bootstrap, topic, batch_size=4)
    assert relay.drain() == RUNS * 5
    assert store.outbox_size() == 0
    relay.close()
    # a second relay finds nothing to send and sends nothing again
    again = _relay(store, kafka_bootstrap, topic)
    assert again.drain() == 0
    again.close()
    found = _sequences_on_topic(kafka_bootstrap, topic, RUNS * 5)
    assert found == {f"run-{i}": [1, 2, 3, 4, 5] for i in range(RUNS)}


def test_events_a_killed_relay_published_but_did_not_record_are_not_sent_again(
    postgres_url: str, kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    """The crash window itself: published and committed, the outbox not yet told."""
    topic = kafka_topic_factory(2)
    store = open_store(COMMAND_EVENTS, postgres_url)
    _write(store, "run-1", 4)
    relay = _relay(store, kafka_bootstrap, topic)
    relay.start()
    forms = store.outbox_batch(10)
    batch = _Batch()
    relay._producer.begin_transaction()
    for form in forms:
        relay._produce(form, batch)
    relay._producer.commit_transaction(30)  # ... and the process dies here
    assert store.outbox_size() == 4
    successor = _relay(store, kafka_bootstrap, topic)
    successor.start()
    assert successor.stats.recovered == 4 and store.outbox_size() == 0
    _write(store, "run-2", 2)
    assert successor.drain() == 2
    successor.close()
    store.close()
    found = _sequences_on_topic(kafka_bootstrap, topic, 6)
    assert found == {"run-1": [1, 2, 3, 4], "run-2": [1, 2]}


def test_a_relay_sigkilled_repeatedly_under_load_loses_doubles_and_reorders_nothing(
    postgres_url: str, kafka_bootstrap: str, kafka_topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = kafka_topic_factory(3)
    per_run = 60
    rng = random.Random(16)
    writers_store = open_store(COMMAND_EVENTS, postgres_url)
    writers = [
        threading.Thread(target=_write, args=(writers_store, f"run-{i}", per_run, 0.15))
        for i in range(RUNS)
    ]
    for thread in writers:
        thread.start()
    log = tmp_path / "relay.log"
    options = {"store": postgres_url, "batch_size": "7", "idle_poll_s": "0.05"}
    probe = open_store(COMMAND_EVENTS, postgres_url)
    kills = 0
    try:
        for _ in range(8):
            before = probe.outbox_size(), sum(probe.relay_offsets(topic).values())
            relay = ServiceProcess(
                "outbox-relay",
                kafka_bootstrap,
                topic,
                group="unused",
                options=options,
                log_path=log,
            )
            try:
                wait_for(  # it published since it started (or there is nothing left to)
                    lambda b=before: (
                        sum(probe.relay_offsets(topic).values()) > b[1]
                        or (probe.outbox_size() == 0 and not any(w.is_alive() for w in writers))
                    ),
                    60,
                    0.02,
                    what="the relay to publish",
                )
                time.sleep(rng.uniform(0.0, 0.5))
                relay.kill()
                kills += 1
            finally:
                relay.close()
        for thread in writers:
            thread.join(120)
        final = ServiceProcess(
            "outbox-relay", kafka_bootstrap, topic, group="unused", options=options, log_path=log
        )
        try:
            final.metrics_port()  # started, its signal handlers installed
            wait_for(lambda: probe.outbox_size() == 0, 120, 0.1, what="the outbox to drain")
            assert final.terminate() == 0
        finally:
            final.close()
    finally:
        for thread in writers:
            thread.join(10)
        probe.close()
        writers_store.close()
    assert kills == 8
    found = _sequences_on_topic(kafka_bootstrap, topic, RUNS * per_run)
    assert found == {f"run-{i}": list(range(1, per_run + 1)) for i in range(RUNS)}


def test_recovery_drops_only_the_stores_own_events(
    postgres_url: str, kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    """An outbox-marked message of the same run and sequence but another eventId (another
    store, a forged header) does not take the event out of the outbox."""
    from confluent_kafka import Producer

    topic = kafka_topic_factory(1)
    store = open_store(COMMAND_EVENTS, postgres_url)
    first = _relay(store, kafka_bootstrap, topic)
    first.start()  # records the topic's end as its position
    _write(store, "run-1", 2)
    foreign = Producer({"bootstrap.servers": kafka_bootstrap})
    for sequence in (1, 2):
        foreign.produce(
            topic,
            key=b"run-1",
            value=b"not ours",
            headers=[("rt.outbox", str(sequence).encode()), ("rt.tenant", b"acme"),
                     ("rt.event_id", b"someone-else")],
        )  # fmt: skip
    assert foreign.flush(30) == 0
    successor = _relay(store, kafka_bootstrap, topic)
    successor.start()
    assert store.outbox_size() == 2
    assert successor.drain() == 2
    successor.close()
    store.close()
