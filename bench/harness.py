"""What every benchmark needs: a broker, a fresh topic, timing, and a results table."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from fastavro import schemaless_reader
from prometheus_client import CollectorRegistry

HEADER_LEN = 10  # magic, format byte, 8-byte writer fingerprint

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Rate:
    name: str
    events: int
    seconds: float
    #: of ``seconds``, how long the consuming thread was blocked (neither running nor waiting
    #: for a CPU): waiting for messages. Unlike the rate, a busy machine does not move it much.
    blocked: float | None = None

    @property
    def per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


@contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """The given cluster, ``KAFKA_BOOTSTRAP_SERVERS``, or a local broker started for the run."""
    address = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if address:
        yield address
        return
    from runtrail.config import Settings
    from runtrail_tools.kafka.broker import LocalBroker
    from runtrail_tools.kafka.ports import free_ports

    settings = Settings()
    port, controller_port = free_ports(2)
    home = Path(".runtrail/bench-kafka").resolve()
    local = LocalBroker(
        home=home,
        port=port,
        controller_port=controller_port,
        cache_dir=settings.kafka_cache_dir,
        heap="1g",
    )
    print(f"starting a local broker under {home} …", flush=True)
    local.start()
    try:
        yield local.bootstrap_servers
    finally:
        local.stop()


def create_topic(bootstrap: str, partitions: int, prefix: str = "bench") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"message.timestamp.type": "LogAppendTime"}
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        future.result(60)
    for future in admin.create_topics([NewTopic(f"{name}.dlq", partitions, 1)]).values():
        future.result(60)
    time.sleep(1.0)
    return name


def delete_topic(bootstrap: str, name: str, *also: str) -> None:
    """Delete a benchmark's topic, its dead-letter topic and the topics ``also`` named (those
    a run did not make are passed over)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic, future in admin.delete_topics([name, f"{name}.dlq", *also]).items():
        try:
            future.result(60)
        except KafkaException as exc:  # best effort clean-up
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                print(f"could not delete {topic}: {exc}")


def _fresh_consumer(bootstrap: str, topic: str, prefix: str) -> Consumer:
    """A consumer in a group of its own, subscribed to ``topic`` from its start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{prefix}-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    return consumer


def raw_consume(bootstrap: str, topic: str, expected: int, batch: int = 2000) -> Rate:
    """librdkafka poll-and-discard: the ceiling any Python consumer can reach on this machine."""
    consumer = _fresh_consumer(bootstrap, topic, "bench-raw")
    seen = 0
    first = 0.0
    try:
        while seen < expected:
            msgs = consumer.consume(batch, 1.0)
            if msgs and not first:
                first = time.perf_counter()
            seen += sum(1 for m in msgs if m.error() is None)
        elapsed = time.perf_counter() - first
    finally:
        consumer.close()
    return Rate("raw consume (librdkafka poll + discard)", seen, elapsed)


def raw_decode(bootstrap: str, topic: str, expected: int, batch: int = 2000) -> Rate:
    """Bare consume plus fastavro's body decode by writer fingerprint (nothing else)."""
    from runtrail.events import avro_schemas

    schemas = {s.fingerprint: s.parsed for s in avro_schemas.retained_schemas()}
    consumer = _fresh_consumer(bootstrap, topic, "bench-rawdec")
    seen, first = 0, 0.0
    try:
        while seen < expected:
            msgs = consumer.consume(batch, 1.0)
            if msgs and not first:
                first = time.perf_counter()
            for m in msgs:
                if m.error() is None:
                    value = m.value()
                    body = io.BytesIO(value)
                    body.seek(HEADER_LEN)
                    schemaless_reader(body, schemas[value[2:HEADER_LEN]], None)
                    seen += 1
        elapsed = time.perf_counter() - first
    finally:
        consumer.close()
    return Rate("bare consume + fastavro decode", seen, elapsed)


def report(
    title: str, rates: list[Rate], baseline: Rate, extra: dict[str, Any] | None = None
) -> None:
    print(f"\n{title}")
    print(f"{'measure':<58} {'events':>10} {'seconds':>9} {'events/s':>11} {'vs raw':>7}")
    for r in rates:
        ratio = r.per_second / baseline.per_second if baseline.per_second else 0.0
        print(f"{r.name:<58} {r.events:>10} {r.seconds:>9.2f} {r.per_second:>11,.0f} {ratio:>6.0%}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{title.split()[0]}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    payload = {
        "title": title,
        "rates": [{**asdict(r), "per_second": r.per_second} for r in rates],
        "baseline": baseline.name,
        **(extra or {}),
    }
    out.write_text(json.dumps(payload, indent=2))
    print(f"\nresults written to {out}")


def _busy_seconds(thread_id: int) -> float:
    """Seconds a thread of this process spent on a CPU or waiting for one (its schedstat)."""
    fields = Path(f"/proc/self/task/{thread_id}/schedstat").read_text().split()
    return (int(fields[0]) + int(fields[1])) / 1e9


@dataclass
class ServiceRun:
    """What :func:`run_service` measured, and what ``while_running`` returned."""

    rate: Rate
    registry: CollectorRegistry
    status: int
    extra: Any = None
    #: CPU seconds of the whole process (every thread) over the timed span
    cpu_seconds: float = 0.0


def run_service(
    factory: Any,
    name: str,
    settings: Any,
    expected: int,
    *,
    label: str | None = None,
    options: dict[str, str] | None = None,
    profile: bool = False,
    while_running: Callable[[], Any] | None = None,
    done_metric: str = "runtrail_processed_total",
    group: str | None = None,
) -> ServiceRun:
    """Run a service through the runtime on this thread until it processed ``expected`` events.

    Timed from the first consumed batch until ``expected`` events were processed (counted on
    the service's thread), or, for another ``done_metric`` (the audit service's sealed links),
    until a watcher sampling it sees ``expected``. A watcher thread stops the runner;
    ``while_running`` (say, a lookup load) runs on it first, with the service caught up and
    still serving. ``profile`` writes a pyinstrument profile to bench/results/.
    ``group`` replaces the consumer group named after the service and topic (a second run of
    a service on the same topic needs its own, or it starts at the first run's commits).
    """
    from runtrail.runtime.runner import ServiceRunner

    registry = CollectorRegistry()
    runner = ServiceRunner(
        factory,
        settings.model_copy(update={"group": group or f"bench-{name}-{settings.events_topic}"}),
        service_name=name,
        options=options,
        metrics_port=0,
        registry=registry,
    )
    labels = {"service": name}
    marks: dict[str, float] = {}
    runner_thread = threading.get_native_id()
    extra: list[Any] = []

    # Only the two counters watched are collected: a whole registry's collect took up to
    # 0.8 ms, and the watcher takes the GIL from the service while it runs (an I/O-bound
    # service waited for it after nearly every system call).
    watched = registry.restricted_registry(["runtrail_consumed_total", done_metric])

    def sample(name: str) -> float:
        for metric in watched.collect():
            for found in metric.samples:
                if found.name == name and found.labels == labels:
                    return found.value
        return 0.0

    def mark(at: str, processed: float | None = None) -> None:
        marks[at] = time.perf_counter()
        marks[f"{at}_busy"] = _busy_seconds(runner_thread)
        marks[f"{at}_cpu"] = time.process_time()
        if processed is not None:
            marks["processed"] = processed

    # The events processed are counted on the service's own thread (the first consumed batch
    # starts the clock, the batch that completes the count stops it), as the Quix apps count
    # theirs: sampling the metrics every 10 ms from the watcher marked both ends up to 10 ms
    # late (2 % of a 1 s run) and took the GIL from the service at each sample. Other done
    # metrics (the audit's sealed links) are still sampled.
    in_thread = done_metric == "runtrail_processed_total"
    if in_thread:
        take, handle, counted = runner._process, runner._handle, [0]

        def first_batch(messages: Any) -> None:
            if "first" not in marks:
                mark("first")
            take(messages)

        def counting(batch: Any) -> None:
            handle(batch)
            counted[0] += len(batch)
            if counted[0] >= expected and "last" not in marks:
                mark("last", counted[0])

        runner._process = first_batch  # type: ignore[method-assign]
        runner._handle = counting  # type: ignore[method-assign]

    def watch() -> None:
        while True:
            if not in_thread:
                if "first" not in marks and sample("runtrail_consumed_total"):
                    mark("first")
                processed = sample(done_metric)
                if processed >= expected:
                    mark("last", processed)
            if "last" in marks:
                try:
                    if while_running is not None:
                        extra.append(while_running())
                finally:
                    runner.request_stop()
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    if profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001)
        with profiler:
            status = runner.run()
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{name}-profile.txt"
        path.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        if profiler.last_session is not None:  # for bench.profiles.top_entries
            profiler.last_session.save(str(RESULTS / f"{name}-profile.json"))
        print(f"  profile written to {path}")
    else:
        status = runner.run()
    watcher.join(10)
    if "last" not in marks:
        raise SystemExit(f"the {name} service stopped (status {status}) before catching up")
    if status != 0:
        raise SystemExit(f"the {name} service stopped with status {status}")
    seconds = marks["last"] - marks["first"]
    rate = Rate(
        label or f"{name} service through the runtime",
        int(marks["processed"]),
        seconds,
        seconds - (marks["last_busy"] - marks["first_busy"]),
    )
    cpu = marks["last_cpu"] - marks["first_cpu"]
    return ServiceRun(rate, registry, status, extra[0] if extra else None, cpu)
