"""The consumer runtime against a real broker: round trip, dead letters, duplicates, metrics."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events import CURRENT_VERSIONS, DATA_MODELS, EventCodec
from runtrail.events.avro_schemas import build_schema, render
from runtrail.runtime import Delivered, Service, ServiceContext
from runtrail.runtime.deadletter import H_OFFSET, H_PARTITION, H_REASON, H_SERVICE, H_TOPIC
from runtrail.runtime.runner import ServiceRunner
from runtrail.runtime.service import PROCESS_CHUNK
from tests.support import (
    consume_all,
    create_topic,
    encode,
    fixture_forms,
    form,
    produce,
    produce_forms,
    unique_topic,
    wait_for,
)

pytestmark = pytest.mark.kafka


class Collecting(Service):
    """Keeps every delivered event in memory (the test reads it)."""

    name = "collect"

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.seen: list[Delivered] = []

    def process(self, batch: Sequence[Delivered]) -> None:
        self.seen.extend(batch)


class Running:
    """A ServiceRunner on a thread."""

    def __init__(self, runner: ServiceRunner) -> None:
        self.runner = runner
        self.status: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.status = self.runner.run()

    @property
    def service(self) -> Any:
        return self.runner.service

    def stop(self) -> int | None:
        self.runner.request_stop()
        self.thread.join(30)
        return self.status


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("events"), partitions=3)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=3)
    return name


def start(
    bootstrap: str, topic: str, tmp_path: Path | None = None, **settings: Any
) -> Iterator[Running]:
    s = Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        commit_interval_ms=100,
        batch_timeout_ms=100,
        group=f"g-{topic}",
        **settings,
    )
    running = Running(ServiceRunner(Collecting, s, service_name="collect", metrics_port=0))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def collector(kafka_bootstrap: str, topic: str) -> Iterator[Running]:
    yield from start(kafka_bootstrap, topic)


#: What each retained old version gains on its way to the current one (all honest nulls).
UPCAST_ADDS: dict[tuple[str, int], dict[str, None]] = {
    ("run.approval_required", 1): {"expiresAt": None},
    ("run.input_required", 1): {"prompt": None},
    ("run.input_received", 1): {"input": None},
    ("MODEL_RETRY", 1): {"maxAttempts": None},
    ("TOOL_CALL", 1): {"type": None},
    ("TOOL_RESULT", 1): {"ok": None, "failed": None, "trace": None},
}


def test_every_event_type_round_trips_and_old_versions_arrive_upcast(
    kafka_bootstrap: str, topic: str, collector: Running
) -> None:
    forms = fixture_forms()
    ordered = []
    for i, key in enumerate(sorted(forms)):
        ordered.append(
            {**forms[key], "runId": f"run-{i}", "correlationId": f"run-{i}", "sequence": "1"}
        )
    produce_forms(kafka_bootstrap, topic, ordered)
    wait_for(lambda: len(collector.service.seen) == len(ordered), 60, what="all events")
    by_run = {d.event.run_id: d for d in collector.service.seen}
    for written in ordered:
        delivered = by_run[written["runId"]]
        assert delivered.written == written  # every field intact, as written
        event = delivered.event
        assert event.schema_version == CURRENT_VERSIONS[written["type"]]
        assert event.recorded_at is not None  # the broker's LogAppendTime
        current = event.json_form()
        assert {
            k: v for k, v in current.items() if k not in ("recordedAt", "schemaVersion", "data")
        } == {k: v for k, v in written.items() if k not in ("recordedAt", "schemaVersion", "data")}
        added = UPCAST_ADDS.get((written["type"], written["schemaVersion"]), {})
        assert current["data"] == {**written["data"], **added}
    assert len(ordered) == len(DATA_MODELS)


def test_poison_goes_to_the_dead_letter_topic_and_processing_continues(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    # a writer schema this code has no model for: decodable, but an unknown event type
    extra = build_schema(DATA_MODELS[("STEP_END", 1)])
    extra["name"], extra["doc"] = "TeleportedV1", "run.teleported v1"
    (tmp_path / "run.teleported.v1.avsc").write_bytes(render(extra))
    unknown_type_value = EventCodec([tmp_path]).encode_json_form(
        form("run.teleported", run_id="run-x", sequence=2, data={"reason": None})
    )
    good = encode(form(run_id="run-x", sequence=1))
    unknown_fp = good[:2] + b"\x07" * 8 + good[10:]
    invalid = EventCodec().encode_json_form(
        form(
            "MODEL_RETRY",
            run_id="run-x",
            sequence=3,
            data={"attempt": 0, "reason": None},
            version=1,
        )
    )
    after = form(run_id="run-x", sequence=4)
    poison = [
        (b"garbage", "undecodable"),
        (unknown_fp, "unknown-schema"),
        (unknown_type_value, "unknown-event-type"),
        (invalid, "invalid-payload"),
    ]
    produce(
        kafka_bootstrap,
        topic,
        [("run-x", good)] + [("run-x", v) for v, _ in poison] + [("run-x", encode(after))],
    )

    gen = start(kafka_bootstrap, topic, extra_schema_dirs=[tmp_path])
    running = next(gen)
    try:
        wait_for(lambda: len(running.service.seen) == 2, 60, what="the good events")
        assert [d.event.sequence for d in running.service.seen] == [1, 4]
        dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=4)
        assert len(dead) == 4
        by_offset = sorted(dead, key=lambda m: int(dict(m.headers())[H_OFFSET]))
        for msg, (value, reason) in zip(by_offset, poison, strict=True):
            headers = dict(msg.headers())
            assert headers[H_REASON].decode() == reason
            assert headers[H_SERVICE] == b"collect"
            assert headers[H_TOPIC].decode() == topic
            assert msg.value() == value  # the original bytes
            assert msg.key() == b"run-x"
            assert int(headers[H_PARTITION]) in range(3)  # the source partition
        metrics = _scrape(running.runner.metrics_port)
        assert 'runtrail_dead_lettered_total{reason="undecodable",service="collect"} 1.0' in metrics
    finally:
        with pytest.raises(StopIteration):
            next(gen)


def test_duplicates_are_not_processed_twice_and_gaps_are_counted(
    kafka_bootstrap: str, topic: str, collector: Running
) -> None:
    first, second, fourth = (form(run_id="run-d", sequence=s) for s in (1, 2, 4))
    values = [encode(first), encode(second), encode(second), encode(fourth)]
    produce(kafka_bootstrap, topic, [("run-d", v) for v in values])
    wait_for(lambda: len(collector.service.seen) >= 3, 60, what="events")
    wait_for(lambda: 'kind="gap"' in _scrape(collector.runner.metrics_port), 10, what="gap metric")
    assert [d.event.sequence for d in collector.service.seen] == [1, 2, 4]
    metrics = _scrape(collector.runner.metrics_port)
    assert 'runtrail_sequence_anomalies_total{kind="duplicate",service="collect"} 1.0' in metrics
    assert 'runtrail_sequence_anomalies_total{kind="gap",service="collect"} 1.0' in metrics


def test_health_readiness_and_metrics(kafka_bootstrap: str, topic: str, collector: Running) -> None:
    produce_forms(kafka_bootstrap, topic, [form(run_id=f"r{i}") for i in range(10)])
    wait_for(lambda: len(collector.service.seen) == 10, 60, what="events")
    port = collector.runner.metrics_port
    wait_for(lambda: _status(port, "/readyz") == 200, 20, what="readiness")
    assert _status(port, "/healthz") == 200
    assert _status(port, "/nope") == 404
    wait_for(
        lambda: 'runtrail_processed_total{service="collect"} 10.0' in _scrape(port),
        10,
        what="count",
    )
    # per-partition lag comes from librdkafka's statistics (every 5 s): caught up means 0
    wait_for(
        lambda: re.search(
            r'runtrail_consumer_lag\{partition="\d",service="collect",topic="[^"]+"\} 0\.0',
            _scrape(port),
        ),
        20,
        what="lag series",
    )
    text = _scrape(port)
    for series in (
        "runtrail_consumed_total",
        "runtrail_batch_seconds_bucket",
        "runtrail_assigned_partitions",
    ):
        assert series in text


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class Batches(Service):
    """Records when each batch came and how many events it held."""

    name = "batches"

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.batches: list[tuple[float, int]] = []

    def process(self, batch: Sequence[Delivered]) -> None:
        self.batches.append((time.monotonic(), len(batch)))

    def seen(self) -> int:
        return sum(n for _, n in self.batches)


def test_what_comes_right_after_a_backlog_is_not_held_for_a_whole_batch(
    kafka_bootstrap: str,
) -> None:
    """After a backlog read without waiting, an empty queue waits for the first message and
    takes what came with it: the end of a backlog is not held for the batch timeout. A trickle
    after that is gathered into batches again, for up to the timeout."""
    topic = create_topic(kafka_bootstrap, unique_topic("backlog"), partitions=1)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    backlog = 3000  # past one fetch, so the backlog's last batches are taken without waiting
    produce_forms(kafka_bootstrap, topic, [form(sequence=i) for i in range(1, backlog + 1)])
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        batch_timeout_ms=3000,
        group=f"g-{topic}",
    )
    running = Running(ServiceRunner(Batches, settings, service_name="batches", metrics_port=0))
    try:
        service = running.service
        wait_for(lambda: service.seen() == backlog, 60, what="the backlog")
        sent = time.monotonic()
        tail = [form(sequence=i) for i in range(backlog + 1, backlog + 11)]
        produce_forms(kafka_bootstrap, topic, tail)
        wait_for(lambda: service.seen() == backlog + 10, 30, what="the ten after it")
        took = service.batches[-1][0] - sent
        assert took < 1.5, f"the events after the backlog waited {took:.2f} s (timeout 3 s)"
        before = len(service.batches)
        for i in range(backlog + 11, backlog + 16):  # a trickle: one every 50 ms
            produce_forms(kafka_bootstrap, topic, [form(sequence=i)])
            time.sleep(0.05)
        wait_for(lambda: service.seen() == backlog + 15, 30, what="the trickle")
        sizes = [n for _, n in service.batches[before:]]
        # gathered, not handed over one by one (two batches if the runner was still in the
        # first-message wait when the trickle began)
        assert sum(sizes) == 5 and len(sizes) <= 2, sizes
    finally:
        running.stop()


class Turns(Service):
    """Records the size of each ``process`` call, and each tick after events (as 0)."""

    name = "turns"
    batch_size = 1000

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.log: list[int] = []

    def process(self, batch: Sequence[Delivered]) -> None:
        self.log.append(len(batch))

    def tick(self, now_ms: int) -> None:
        if self.log and self.log[-1]:
            self.log.append(0)

    def seen(self) -> int:
        return sum(self.log)


def test_a_large_batch_reaches_process_in_chunks_that_fit_the_caches_then_one_tick(
    kafka_bootstrap: str,
) -> None:
    """A batch larger than ``PROCESS_CHUNK`` (sessions takes 2,000 for its per-batch saves)
    is decoded and handed to ``process`` a chunk at a time, so each chunk's events are still
    in the CPU caches when the service reads them; the tick comes once, after the whole
    batch, so per-batch work stays per batch."""
    topic = create_topic(kafka_bootstrap, unique_topic("chunks"), partitions=1)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    backlog = 3000
    produce_forms(kafka_bootstrap, topic, [form(sequence=i) for i in range(1, backlog + 1)])
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        group=f"g-{topic}",
    )
    running = Running(ServiceRunner(Turns, settings, service_name="turns", metrics_port=0))
    try:
        service = running.service
        wait_for(lambda: service.seen() == backlog, 60, what="the backlog")
        wait_for(lambda: service.log[-1] == 0, 10, what="the tick after the last batch")
        turns: list[list[int]] = [[]]
        for size in service.log:
            if size:
                turns[-1].append(size)
            else:
                turns.append([])
        chunks = [size for sizes in turns for size in sizes]
        assert max(chunks) <= PROCESS_CHUNK, chunks
        batches = [sum(sizes) for sizes in turns if sizes]
        assert max(batches) <= Turns.batch_size and sum(batches) == backlog
        assert max(batches) > PROCESS_CHUNK, batches  # a batch came in chunks, then one tick
    finally:
        running.stop()
