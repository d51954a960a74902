"""The publisher: envelope defaults, sequencing, headers, redaction, rejection, producer config.

Unit tests run against :class:`tests.fake_producer.FakeProducer`; the ``kafka`` tests publish
to a real broker and read the topic back with a plain consumer.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import CURRENT_VERSIONS, Actor, Event, EventCodec
from runtrail.events.runtime_events import ToolCall
from runtrail.publisher import Publisher, default_redactor, producer_config
from runtrail.publisher.sequencing import SequenceCounter
from tests.fake_producer import FakeProducer, Sent

CODEC = EventCodec()
ISO_MS_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def settings(tmp_path: Path, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "bootstrap_servers": "127.0.0.1:1",
        "spool_dir": tmp_path / "spool",
        "tenant": "t1",
        "events_topic": "events",
        **extra,
    }
    return Settings(**values)


@pytest.fixture
def fake() -> FakeProducer:
    return FakeProducer()


@pytest.fixture
def pub(tmp_path: Path, fake: FakeProducer) -> Any:
    publisher = Publisher(settings(tmp_path), producer_factory=lambda config: fake)
    yield publisher
    publisher.close(timeout=1)


def sent(pub: Publisher, fake: FakeProducer) -> list[Sent]:
    assert pub.flush(5) == 0
    return fake.log


def decoded(message: Sent) -> Event:
    return CODEC.decode(message.value).event


def headers(message: Sent) -> dict[str, bytes]:
    return dict(message.headers)


# --- envelope ------------------------------------------------------------------------------
def test_publish_builds_the_envelope(pub: Publisher, fake: FakeProducer) -> None:
    event_id = pub.publish("TOOL_CALL", "run-1", {"callId": "c1", "toolName": "search"})
    assert event_id is not None
    assert str(uuid.UUID(event_id)) == event_id and uuid.UUID(event_id).version == 7
    (message,) = sent(pub, fake)
    event = decoded(message)
    assert event.event_id == event_id
    assert event.run_id == "run-1"
    assert event.tenant_id == "t1"
    assert event.correlation_id == "run-1"
    assert event.actor == Actor(kind="agent", id="runtrail-publisher")
    assert event.schema_version == CURRENT_VERSIONS["TOOL_CALL"]
    assert event.sequence == 1
    assert ISO_MS_Z.match(event.occurred_at), event.occurred_at
    assert message.key == b"run-1"
    assert message.topic == "events"


def test_publish_keeps_what_is_given(pub: Publisher, fake: FakeProducer) -> None:
    pub.publish(
        "run.approval_required",
        "run-2",
        {"actionDigest": "sha256:ab"},
        session_id="s1",
        turn_id="t9",
        step=3,
        actor={"kind": "user", "id": "ann"},
        causation_event_id="cause",
        correlation_id="corr",
        tenant_id="t2",
    )
    event = decoded(sent(pub, fake)[0])
    assert (event.session_id, event.turn_id, event.step) == ("s1", "t9", 3)
    assert event.actor == Actor(kind="user", id="ann")
    assert (event.causation_event_id, event.correlation_id, event.tenant_id) == (
        "cause",
        "corr",
        "t2",
    )
    assert event.schema_version == 2  # the current version of this type
    assert headers(sent(pub, fake)[0])["rt.tenant"] == b"t2"


def test_publish_accepts_a_payload_model(pub: Publisher, fake: FakeProducer) -> None:
    pub.publish("TOOL_CALL", "run-1", ToolCall(call_id="c1", arguments={"q": 1}))
    assert decoded(sent(pub, fake)[0]).data == ToolCall(call_id="c1", arguments={"q": 1})


def test_old_schema_version_on_request(pub: Publisher, fake: FakeProducer) -> None:
    pub.publish("run.approval_required", "r", {"actionDigest": "d"}, schema_version=1)
    written = CODEC.decode(sent(pub, fake)[0].value).written
    assert written["schemaVersion"] == 1


def test_key_is_the_utf8_run_id(pub: Publisher, fake: FakeProducer) -> None:
    pub.publish("STEP_END", "läuft-🚀", {})
    assert sent(pub, fake)[0].key == "läuft-🚀".encode()


def test_headers(pub: Publisher, fake: FakeProducer) -> None:
    event_id = pub.publish(
        "STEP_END",
        "run-1",
        {},
        trace_context={"traceparent": TRACEPARENT, "tracestate": "vendor=x"},
    )
    plain = pub.publish("STEP_END", "run-1", {})
    bad = pub.publish("STEP_END", "run-1", {}, trace_context={"traceparent": "nonsense"})
    with_trace, without, ill_formed = (headers(m) for m in sent(pub, fake))
    assert with_trace == {
        "rt.type": b"STEP_END",
        "rt.schema_version": b"1",
        "rt.tenant": b"t1",
        "rt.event_id": str(event_id).encode(),
        "traceparent": TRACEPARENT.encode(),
        "tracestate": b"vendor=x",
    }
    assert without["rt.event_id"] == str(plain).encode()
    assert "traceparent" not in without and "tracestate" not in without
    assert bad is not None and "traceparent" not in ill_formed


# --- sequencing ----------------------------------------------------------------------------
def test_sequences_are_per_run(pub: Publisher, fake: FakeProducer) -> None:
    for run in ["a", "b", "a", "a", "b"]:
        pub.publish("STEP_END", run, {})
    seqs = [(decoded(m).run_id, decoded(m).sequence) for m in sent(pub, fake)]
    assert seqs == [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 2)]


def test_a_carried_sequence_is_kept_and_the_counter_moves_past(
    pub: Publisher, fake: FakeProducer
) -> None:
    pub.publish("STEP_END", "a", {})
    form = {"runId": "a", "type": "STEP_END", "schemaVersion": 1, "sequence": "7", "data": {}}
    pub.on_event(form)
    pub.publish("STEP_END", "a", {})
    pub.on_event({**form, "sequence": "3"})  # kept as given; the counter does not go back
    pub.publish("STEP_END", "a", {})
    assert [decoded(m).sequence for m in sent(pub, fake)] == [1, 7, 8, 3, 9]


def test_set_next_sequence_resumes_a_run(pub: Publisher, fake: FakeProducer) -> None:
    pub.set_next_sequence("a", 42)
    pub.publish("STEP_END", "a", {})
    pub.forget_run("a")
    pub.publish("STEP_END", "a", {})
    assert [decoded(m).sequence for m in sent(pub, fake)] == [42, 1]
    with pytest.raises(ValueError):
        pub.set_next_sequence("a", 0)


def test_rejected_events_use_no_sequence(pub: Publisher, fake: FakeProducer) -> None:
    pub.publish("STEP_END", "a", {})
    assert pub.publish("MODEL_RETRY", "a", {"attempt": 0}) is None
    pub.publish("STEP_END", "a", {})
    assert [decoded(m).sequence for m in sent(pub, fake)] == [1, 2]


def test_sequence_counter_unit() -> None:
    counter = SequenceCounter()
    assert counter.peek("t", "r") == 1
    counter.commit("t", "r", 1)
    counter.commit("t", "r", 5)
    counter.commit("t", "r", 2)
    assert counter.peek("t", "r") == 6
    assert counter.peek("other", "r") == 1  # another tenant's run of the same ID
    assert len(counter) == 1


# --- on_event ------------------------------------------------------------------------------
def test_on_event_with_an_event_object(pub: Publisher, fake: FakeProducer) -> None:
    event = Event.model_validate(
        {
            "eventId": "e-1",
            "runId": "r",
            "tenantId": "other",
            "sequence": "4",
            "type": "STEP_END",
            "schemaVersion": 1,
            "occurredAt": "2026-01-01T00:00:00.000Z",
            "actor": {"kind": "service", "id": "svc"},
            "correlationId": "c",
            "data": {"reason": "done"},
        }
    )
    assert pub.on_event(event) == "e-1"
    assert decoded(sent(pub, fake)[0]) == event


def test_on_event_fills_missing_envelope_fields(pub: Publisher, fake: FakeProducer) -> None:
    event_id = pub.on_event({"runId": "r", "type": "STEP_END", "schemaVersion": 1, "data": {}})
    event = decoded(sent(pub, fake)[0])
    assert event.event_id == event_id
    assert (event.tenant_id, event.correlation_id, event.sequence) == ("t1", "r", 1)
    assert event.actor.id == "runtrail-publisher"


# --- redaction -----------------------------------------------------------------------------
def test_secrets_never_reach_the_wire(pub: Publisher, fake: FakeProducer) -> None:
    key = "sk-ant-api03-" + "q" * 40
    pub.publish(
        "MODEL_REQUEST",
        "r",
        {"prompt": {"headers": {"x-api-key": "plain-secret"}, "text": f"use {key}"}},
    )
    message = sent(pub, fake)[0]
    assert b"plain-secret" not in message.value and key.encode() not in message.value
    prompt = decoded(message).data.model_dump()["prompt"]
    assert prompt == {"headers": {"x-api-key": "[REDACTED]"}, "text": "use [REDACTED]"}


def test_a_custom_redactor_runs_before_validation(tmp_path: Path, fake: FakeProducer) -> None:
    seen: list[dict[str, Any]] = []

    def redactor(form: dict[str, Any]) -> dict[str, Any]:
        seen.append(form)
        return {**default_redactor(form), "data": {"reason": "scrubbed"}}

    with Publisher(settings(tmp_path), redactor=redactor, producer_factory=lambda c: fake) as pub:
        # an unknown field would fail validation; the redactor replaces it first
        assert pub.publish("STEP_END", "r", {"nonsense": 1}) is not None
        assert decoded(sent(pub, fake)[0]).data.model_dump() == {"reason": "scrubbed"}
    assert seen[0]["data"] == {"nonsense": 1}
    assert seen[0]["eventId"] and seen[0]["tenantId"] == "t1"  # defaults filled before


def test_a_failing_redactor_rejects(tmp_path: Path, fake: FakeProducer) -> None:
    def broken(form: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("boom")

    with Publisher(settings(tmp_path), redactor=broken, producer_factory=lambda c: fake) as pub:
        result = pub.submit({"runId": "r", "type": "STEP_END", "schemaVersion": 1, "data": {}})
        assert (result.event_id, result.reason) == (None, "redaction-failed")
        assert fake.produce_calls == 0


# --- rejection -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (
            lambda p: p.submit({"runId": "r", "type": "NOPE", "schemaVersion": 1, "data": {}}),
            "unknown-event-type",
        ),
        (
            lambda p: p.submit(
                {"runId": "r", "type": "MODEL_RETRY", "schemaVersion": 1, "data": {"attempt": "x"}}
            ),
            "invalid-payload",
        ),
        (
            lambda p: p.submit({"runId": " ", "type": "STEP_END", "schemaVersion": 1, "data": {}}),
            "invalid-payload",
        ),
        (lambda p: p.submit({"runId": "r", "type": "NOPE", "data": {}}), "unknown-event-type"),
        (lambda p: p.submit({"type": "STEP_END", "data": {}}), "invalid-payload"),
        (
            lambda p: p.submit(
                {"runId": "r", "type": "STEP_END", "schemaVersion": 1, "data": {}, "bogus": 1}
            ),
            "invalid-payload",
        ),
        (
            lambda p: p.submit(
                {"runId": "r", "type": "STEP_END", "schemaVersion": 1, "sequence": "0", "data": {}}
            ),
            "invalid-payload",
        ),
        (lambda p: p.submit(["not", "a", "dict"]), "invalid-payload"),
    ],
)
def test_invalid_events_are_rejected_with_a_reason(
    pub: Publisher, fake: FakeProducer, call: Any, reason: str
) -> None:
    result = call(pub)
    assert result.event_id is None and not result.accepted
    assert result.reason == reason, result.detail
    assert fake.produce_calls == 0


def test_rejections_return_none_are_counted_and_never_raise(
    tmp_path: Path, fake: FakeProducer
) -> None:
    registry = CollectorRegistry()
    with Publisher(settings(tmp_path), registry=registry, producer_factory=lambda c: fake) as pub:
        assert pub.publish("NOPE", "r", {}) is None
        assert pub.publish("MODEL_RETRY", "r", {"attempt": -1}) is None
        assert pub.publish("STEP_END", "r", {"unknown": 1}) is None
        assert pub.publish("STEP_END", "r", None) is None  # type: ignore[arg-type]
        assert pub.publish("STEP_END", "r", {}, actor={"kind": "robot", "id": "x"}) is None
        assert pub.publish("STEP_END", 5, {}) is None  # type: ignore[arg-type]
        assert pub.on_event(object()) is None  # type: ignore[arg-type]
        assert pub.publish("STEP_END", "r", {}) is not None
        assert pub.flush(5) == 0
        stats = pub.stats()
    assert (stats.rejected, stats.sent, stats.spooled) == (7, 1, 0)
    sample = registry.get_sample_value
    assert sample("runtrail_publisher_events_total", {"outcome": "rejected"}) == 7
    assert sample("runtrail_publisher_events_total", {"outcome": "sent"}) == 1
    assert sample("runtrail_publisher_spool_depth") == 0


def test_unexpected_errors_are_contained(tmp_path: Path, fake: FakeProducer) -> None:
    def explode(form: dict[str, Any]) -> bytes:
        raise ZeroDivisionError("bug")

    with Publisher(settings(tmp_path), producer_factory=lambda c: fake) as pub:
        pub._codec.encode_json_form = explode  # type: ignore[method-assign]
        pub._codec.encode_exact = explode  # type: ignore[method-assign]  (the fast path's)
        result = pub.submit({"runId": "r", "type": "STEP_END", "schemaVersion": 1, "data": {}})
        assert result.reason == "internal-error"


def test_acked_offsets_and_context_manager(tmp_path: Path, fake: FakeProducer) -> None:
    with Publisher(settings(tmp_path), producer_factory=lambda c: fake) as pub:
        for _ in range(3):
            pub.publish("STEP_END", "r", {})
        assert pub.flush(5) == 0
        assert pub.acked_offsets() == {0: 2}
    assert pub.publish("STEP_END", "r", {}) is None  # closed by the with block


# --- producer configuration ----------------------------------------------------------------
def test_producer_config(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        compression="lz4",
        linger_ms=20,
        delivery_timeout_ms=7000,
        kafka_options={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "enable.idempotence": "false",
            "partitioner": "consistent_random",
            "batch.num.messages": "500",
        },
    )
    config = producer_config(s)
    assert config["bootstrap.servers"] == "127.0.0.1:1"
    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"
    assert config["partitioner"] == "murmur2_random"
    assert config["compression.type"] == "lz4"
    assert config["linger.ms"] == 20
    assert config["message.timeout.ms"] == 3 * 7000 + 10_000  # a backstop behind our own
    assert config["message.max.bytes"] >= s.max_event_bytes
    assert config["security.protocol"] == "SASL_SSL"  # passthrough
    assert config["sasl.mechanism"] == "PLAIN"
    assert config["batch.num.messages"] == "500"  # tuning may be overridden
    assert config["batch.size"] == 1_048_576


def test_the_real_producer_accepts_the_config(tmp_path: Path) -> None:
    with Publisher(settings(tmp_path)) as pub:  # librdkafka validates every option
        assert pub.topic == "events"


# --- Kafka's murmur2 (for the partitioner test) ---------------------------------------------
def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_murmur2_matches_kafkas_test_vectors() -> None:
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {key: murmur2(key) for key in cases} == cases


# --- against a real broker -----------------------------------------------------------------
def read_topic(bootstrap: str, topic: str, expect: int, timeout: float = 60.0) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                out.append(msg)
        for msg in consumer.consume(500, 1.0):  # nothing more than expected
            out.append(msg)
    finally:
        consumer.close()
    return out


@pytest.mark.kafka
def test_round_trip_through_kafka(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory(3)
    s = settings(tmp_path, bootstrap_servers=kafka_bootstrap, events_topic=topic)
    runs = [f"run-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    ids: dict[str, str] = {}
    with Publisher(s) as pub:
        for i in range(20):
            run = runs[i % len(runs)]
            event_id = pub.publish(
                "TOOL_CALL", run, {"callId": f"c{i}"}, trace_context={"traceparent": TRACEPARENT}
            )
            assert event_id is not None
            ids[event_id] = run
        assert pub.flush(30) == 0
        stats = pub.stats()
        acked = pub.acked_offsets()
    assert (stats.sent, stats.spooled, stats.rejected) == (20, 0, 0)
    messages = read_topic(kafka_bootstrap, topic, 20)
    assert len(messages) == 20
    seqs: dict[str, list[int]] = {run: [] for run in runs}
    partitions: dict[str, set[int]] = {run: set() for run in runs}
    for msg in messages:
        event = CODEC.decode(msg.value()).event
        assert msg.key() == event.run_id.encode()
        assert ids[event.event_id] == event.run_id
        hdrs = dict(msg.headers())
        assert hdrs["rt.type"] == b"TOOL_CALL"
        assert hdrs["rt.schema_version"] == str(CURRENT_VERSIONS["TOOL_CALL"]).encode()
        assert hdrs["rt.tenant"] == b"t1"
        assert hdrs["rt.event_id"] == event.event_id.encode()
        assert hdrs["traceparent"] == TRACEPARENT.encode()
        seqs[event.run_id].append(event.sequence)
        partitions[event.run_id].add(msg.partition())
        assert acked[msg.partition()] >= msg.offset()
    assert all(s == [1, 2, 3, 4, 5] for s in seqs.values()), seqs
    assert all(len(p) == 1 for p in partitions.values())


@pytest.mark.kafka
def test_partitions_match_the_java_default_partitioner(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    partitions = 7
    topic = kafka_topic_factory(partitions)
    s = settings(tmp_path, bootstrap_servers=kafka_bootstrap, events_topic=topic)
    keys = [
        "run-1",
        "21",
        "foobar",
        "a-little-bit-long-string",
        "äöü-run",
        *[f"r{i}" for i in range(20)],
    ]
    expected = {key: java_partition(key.encode(), partitions) for key in keys}
    assert len(set(expected.values())) > 3  # the keys really spread over partitions
    with Publisher(s) as pub:
        for key in keys:
            assert pub.publish("STEP_END", key, {}) is not None
        assert pub.flush(30) == 0
    got = {
        msg.key().decode(): msg.partition() for msg in read_topic(kafka_bootstrap, topic, len(keys))
    }
    assert got == expected
