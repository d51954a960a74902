"""Service output topics (cache, sessions, audit) ride out a SIGKILLed broker, in process.

Each service is driven as the runtime drives it (process, then flush) against a real broker
that is SIGKILLed and restarted: while it is away, flush raises ``StoreUnavailable`` (the
runtime's signal to report not ready, commit nothing and retry) and never another error; when
it returns, the same flush succeeds and the topic holds every record exactly once, in order.
A record too large for its topic is dead-lettered (``too-large``) and the service goes on.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import validate_json_form
from runtrail.kafka.output_topic import OutputTopic, output_message_max_bytes
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.resume.records import entry_record
from runtrail.runtime import Delivered, Service, ServiceContext
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail_services.audit.messages import KIND_HEADER
from runtrail_services.audit.service import AuditService
from runtrail_services.resume_cache.service import ResumeCacheService
from runtrail_services.sessions.service import SessionsService
from runtrail_tools.kafka.broker import LocalBroker
from tests.checkpoint_support import held
from tests.orphan_support import Orphaned
from tests.sessions_support import session_forms
from tests.support import create_topic, form, unique_topic, wait_for

pytestmark = [pytest.mark.kafka]

EVENTS = "events"
DownFn = Callable[[], None]


def sigkill(broker: LocalBroker) -> None:
    """SIGKILL the broker (no clean shutdown), then clear its state so it can start again."""
    pid = broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    broker.stop()


def delivered(forms: list[dict[str, Any]], first_offset: int) -> list[Delivered]:
    return [
        Delivered(validate_json_form(f), f, EVENTS, 0, first_offset + i, 0, f["runId"].encode())
        for i, f in enumerate(forms)
    ]


def context(
    tmp_path: Path, bootstrap: str, options: dict[str, str], **settings: Any
) -> tuple[ServiceContext, list[tuple[Delivered, str, str]]]:
    dead: list[tuple[Delivered, str, str]] = []
    ctx = ServiceContext(
        settings=Settings(
            bootstrap_servers=bootstrap, events_topic=EVENTS, state_dir=tmp_path, **settings
        ),
        options=options,
        registry=CollectorRegistry(),
        dead_letter=lambda d, reason, detail: dead.append((d, reason, detail)),
    )
    return ctx, dead


def read_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, Any]]:
    """Every record of a one-partition topic, in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[bytes | None, bytes | None, Any]] = []
        deadline = time.monotonic() + 60
        while len(out) < high and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1):
                if msg.error() is None:
                    out.append((msg.key(), msg.value(), msg.headers()))
        return out
    finally:
        consumer.close()


def flush_until_up(service: Service, timeout: float = 120.0) -> int:
    """Retry flush as the runtime does; returns how many attempts raised StoreUnavailable."""
    failures = 0
    deadline = time.monotonic() + timeout
    while True:
        try:
            service.flush()
            return failures
        except StoreUnavailable:
            failures += 1
            assert time.monotonic() < deadline, "the output never became available again"
            time.sleep(0.5)


def ride_out_outage(broker: LocalBroker, service: Service, forms: list[dict[str, Any]]) -> None:
    """First half delivered with the broker up; the second half processed while it is dead."""
    half = len(forms) // 2
    service.process(delivered(forms[:half], 0))
    service.flush()
    sigkill(broker)
    service.process(delivered(forms[half:], half))
    with pytest.raises(StoreUnavailable):
        for _ in range(3):  # audit confirms a flush later: the second one must already fail
            service.flush()
    broker.start()
    assert flush_until_up(service) >= 0
    service.flush()  # audit: what the last flush sent is confirmed now


def expected_entries(forms: list[dict[str, Any]], values: bool = False) -> Any:
    """The cache-topic entry records these events make (from the pure builder)."""
    builder, batch = EntryBuilder(), WriteBatch()
    for f in forms:
        builder.feed(validate_json_form(f), 0, batch)
    records = dict(entry_record(e) for e in batch.entries.values())
    return records if values else set(records)


@pytest.fixture
def broker(restartable_broker: LocalBroker) -> Iterator[LocalBroker]:
    yield restartable_broker


def test_resume_cache_flush_rides_out_a_broker_sigkill(tmp_path: Path, broker: LocalBroker) -> None:
    bootstrap = broker.bootstrap_servers
    cache_topic = create_topic(
        bootstrap, unique_topic("cache"), partitions=1, **{"cleanup.policy": "compact"}
    )
    ctx, dead = context(
        tmp_path,
        bootstrap,
        {"http_port": "0", "tokens": '{"tok": "t1"}'},
        resume_cache_topic=cache_topic,
    )
    svc = ResumeCacheService(ctx)
    forms = session_forms(40, payload=10)
    try:
        ride_out_outage(broker, svc, forms)
        records = read_topic(bootstrap, cache_topic)
    finally:
        svc.close()
    data = [(k, v) for k, v, _ in records if k is not None and not k.startswith(b'["position"')]
    assert len(data) == len(set(data)), "a cache record was written twice"
    entries = {k for k, _ in data if k.startswith(b'["entry"')}
    assert entries == expected_entries(forms)
    assert not dead


def test_sessions_pointers_ride_out_a_broker_sigkill(tmp_path: Path, broker: LocalBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(
        bootstrap, unique_topic("sessions"), partitions=1, **{"cleanup.policy": "compact"}
    )
    ctx, dead = context(
        tmp_path,
        bootstrap,
        {"http_enabled": "false", "publish_pointers": "true", "every_n_events": "0"},
        sessions_topic=topic,
    )
    svc = SessionsService(ctx)
    forms = session_forms(20, session="s1") + session_forms(20, session="s2", seed="other")
    try:
        ride_out_outage(broker, svc, forms)
        assert held(svc, flush=False) == {}
        records = read_topic(bootstrap, topic)
        stored = {s: svc.store.load("t1", s) for s in ("s1", "s2")}
    finally:
        svc.close()
    values = [value for _, value, _ in records]
    assert len(values) == len(set(values)), "a pointer was written twice"
    for session, snapshot in stored.items():
        assert snapshot is not None and snapshot.revision == 20
        assert any(snapshot.digest.encode() in (v or b"") for v in values), session
    assert not dead


def test_audit_links_ride_out_a_broker_sigkill(tmp_path: Path, broker: LocalBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("audit"), partitions=1)
    ctx, dead = context(tmp_path, bootstrap, {"tree_head_interval_s": "0"}, audit_topic=topic)
    svc = AuditService(ctx)
    forms = [
        form(run_id="run-a", tenant="t1", sequence=seq, eventId=f"t1-run-a-{seq}")
        for seq in range(1, 31)
    ]
    try:
        ride_out_outage(broker, svc, forms)
        chain = svc.store.load_chain("t1", "run-a")
    finally:
        svc.close()
    links = [
        value
        for _, value, headers in read_topic(bootstrap, topic)
        if dict(headers)[KIND_HEADER] == b"link"
    ]
    assert len(chain) == 30
    assert len(links) == 30, "links lost or published twice"
    assert len(set(links)) == 30
    assert not dead


def test_a_cache_record_too_large_for_its_producer_is_dead_lettered_and_the_service_goes_on(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    cache_topic = create_topic(
        kafka_bootstrap, unique_topic("cache"), partitions=1, **{"cleanup.policy": "compact"}
    )
    ctx, dead = context(
        tmp_path,
        kafka_bootstrap,
        {"http_port": "0", "tokens": '{"tok": "t1"}'},
        resume_cache_topic=cache_topic,
        max_event_bytes=256 * 1024,  # producer limit: 256 KiB + headroom, far below 2 MiB
    )
    svc = ResumeCacheService(ctx)
    forms = session_forms(10, payload=2 * 1024 * 1024)  # each answer is 2 MiB
    try:
        svc.process(delivered(forms, 0))
        svc.flush()  # neither raises nor stops
        canary = session_forms(20, start=10, payload=10)
        svc.process(delivered(canary, 10))
        svc.flush()
        records = read_topic(kafka_bootstrap, cache_topic)
    finally:
        svc.close()
    limit = output_message_max_bytes(ctx.settings)
    built = expected_entries(forms + canary, values=True)
    too_large = {k for k, v in built.items() if len(k) + len(v) > limit}
    assert too_large and len(too_large) < len(built)
    assert [reason for _, reason, _ in dead] == ["too-large"] * len(too_large)
    assert all("record to" in detail for _, _, detail in dead)
    # the event dead-lettered is the one that closed the oversized node
    assert {d.event.type for d, _, _ in dead} <= {"STEP_END", "MODEL_REQUEST"}
    entries = {k for k, _, _ in records if k is not None and k.startswith(b'["entry"')}
    assert entries == set(built) - too_large  # the canary's entries went through


@pytest.mark.parametrize("outage", [False, True], ids=["broker-up", "broker-sigkilled"])
def test_records_beside_one_too_large_for_the_topic_are_delivered_and_only_it_is_dropped(
    restartable_broker: LocalBroker, outage: bool
) -> None:
    """The broker refuses a whole batch over the topic's ``max.message.bytes`` and librdkafka
    reports the size error for every record in it: the small ones must be produced again
    alone and land, and only the large one is reported too large; also when the three were
    sent while the broker was SIGKILLed and the flush rode out the outage."""
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(
        bootstrap, unique_topic("small"), partitions=1, **{"max.message.bytes": "2000"}
    )
    dropped: list[tuple[Any, str]] = []
    out = OutputTopic(
        Settings(bootstrap_servers=bootstrap),
        topic,
        client_id="too-large-test",
        on_too_large=lambda tag, detail: dropped.append((tag, detail)),
        overrides={"linger.ms": 200},  # all three in one produce batch
    )
    if outage:
        sigkill(restartable_broker)
    large = os.urandom(5000)  # incompressible: the producer compresses batches
    out.send(b"k", b"before", tag="before")
    out.send(b"k", large, tag="large")
    out.send(b"k", b"after", tag="after")
    if outage:
        with pytest.raises(StoreUnavailable):
            out.confirm(2)
        restartable_broker.start()
        _confirm_when_back(out)
    else:
        out.confirm(30)
    out.close()
    bootstrap = restartable_broker.bootstrap_servers
    assert [tag for tag, _ in dropped] == ["large"]
    assert "5000-byte record" in dropped[0][1]
    assert out.unacknowledged == 0
    assert [value for _, value, _ in read_topic(bootstrap, topic)] == [b"before", b"after"]


def test_a_producer_that_lost_every_broker_is_replaced_and_its_records_land_once_in_order(
    restartable_broker: LocalBroker, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("orphan"), partitions=1)
    out = OutputTopic(Settings(bootstrap_servers=bootstrap), topic, client_id="orphan-test")
    out.send(b"k", b"0")
    out.confirm(30)
    # the real client's own statistics list its broker: a verdict of "none" is taken back
    out._orphan.observe([], time.monotonic())
    wait_for(lambda: _knows_a_broker(out), 15, what="the client's statistics")
    sigkill(restartable_broker)
    values = [str(i).encode() for i in range(1, 41)]
    for value in values:
        out.send(b"k", value)
    out._orphan = Orphaned()
    with (
        caplog.at_level("WARNING", logger="runtrail.kafka.output_topic"),
        pytest.raises(StoreUnavailable),
    ):
        out.confirm(2)
    assert "starting a new producer" in caplog.text, caplog.text
    assert out.unacknowledged == len(values)  # taken back, none lost
    restartable_broker.start()
    _confirm_when_back(out)
    out.close()
    landed = [value for _, value, _ in read_topic(restartable_broker.bootstrap_servers, topic)]
    assert landed == [b"0", *values]


def _knows_a_broker(out: OutputTopic) -> bool:
    out.poll()  # statistics are served by polls
    return out._orphan.since is None


def _confirm_when_back(out: OutputTopic) -> None:
    """Confirm until the broker, started again, has taken every record (bounded)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            out.confirm(5)
            return
        except StoreUnavailable:
            assert time.monotonic() < deadline, "the topic never became available again"
