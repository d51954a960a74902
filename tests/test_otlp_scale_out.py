"""The scaled-out OTLP ingest on the real broker: receivers in mode ``forward`` write raw spans
to the raw topic, ``runtrail run otlp-mapper`` (a consumer group) maps them.

Spans come from the real OTel SDK and go out through its real OTLP/HTTP exporter. What the
mapper wrote is checked as every service reads it: per run, in partition order, through the
runtime's own per-run sequence checker (a duplicate is skipped, a conflict dead-lettered).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtrail.adapters.otel import span_view
from runtrail.adapters.otel_mapping import TraceMapper
from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.runtime.runner import ServiceRunner
from runtrail.runtime.sequencing import SequenceChecker, Verdict
from runtrail_services.otlp_ingest.mapper import OtlpMapperService
from runtrail_services.otlp_ingest.service import OtlpIngestReceiver
from tests.otel_support import run_agent
from tests.support import (
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    unique_topic,
    wait_for,
)

pytestmark = [pytest.mark.kafka]
CODEC = EventCodec()
TOKEN = "token-acme-0123456789"
EVENTS_PER_RUN = 11  # run_agent's run: see tests/test_otlp_ingest.py EXPECTED_TYPES
RAW_PARTITIONS = 4


@pytest.fixture
def settings(kafka_bootstrap: str, tmp_path: Path) -> Settings:
    """Topics and a mapper group of this test alone."""
    prefix = unique_topic("scale")
    # the mapper's trace ledger, as `topics ensure` makes it: named after the raw topic
    create_topic(
        kafka_bootstrap,
        f"{prefix}.otlp-raw.traces",
        partitions=RAW_PARTITIONS,
        **{"cleanup.policy": "compact"},
    )
    return Settings(
        bootstrap_servers=kafka_bootstrap,
        otlp_raw_topic=create_topic(
            kafka_bootstrap, f"{prefix}.otlp-raw", partitions=RAW_PARTITIONS
        ),
        events_topic=create_topic(kafka_bootstrap, f"{prefix}.events", partitions=2),
        dlq_topic=create_topic(kafka_bootstrap, f"{prefix}.dlq", partitions=1),
        group=f"{prefix}.otlp-mapper",
        state_dir=tmp_path / "state",
        commit_interval_ms=200,
        batch_timeout_ms=100,
    )


# --- the parts --------------------------------------------------------------------------------
@contextmanager
def receiver(settings: Settings, spool: Path) -> Iterator[OtlpIngestReceiver]:
    """A receiver in mode forward, in this process, with a spool of its own."""
    options = {"http_port": "0", "mode": "forward", "tokens": json.dumps({"acme": TOKEN})}
    running = OtlpIngestReceiver(
        settings.model_copy(update={"spool_dir": spool}), options=options, metrics_port=0
    )
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    wait_for(lambda: running.health.ready, 60, what="receiver ready")
    try:
        yield running
    finally:
        running.request_stop()
        thread.join(30)


@contextmanager
def mapper(settings: Settings, **options: str) -> Iterator[ServiceRunner]:
    """One mapper instance (a member of the mapper group), in this process."""
    runner = ServiceRunner(
        OtlpMapperService, settings, service_name="otlp-mapper", metrics_port=0, options=options
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        runner.request_stop()
        thread.join(30)


def env_of(settings: Settings, spool: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RUNTRAIL_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "RUNTRAIL_EVENTS_TOPIC": settings.events_topic,
        "RUNTRAIL_DLQ_TOPIC": settings.dlq_topic,
        "RUNTRAIL_OTLP_RAW_TOPIC": settings.otlp_raw_topic,
        "RUNTRAIL_GROUP": str(settings.group),
        "RUNTRAIL_STATE_DIR": str(settings.state_dir),
        "RUNTRAIL_SPOOL_DIR": str(spool),
        "RUNTRAIL_COMMIT_INTERVAL_MS": "200",
        "RUNTRAIL_BATCH_TIMEOUT_MS": "100",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ready(metrics_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def process(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``runtrail ARGS`` as its own process (output to ``log``)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "runtrail_tools.cli.main", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def traced(runs: int) -> tuple[list[str], list[ReadableSpan]]:
    """``runs`` agent runs traced with the real SDK: their run IDs and spans in end order."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run_ids = [run_agent(provider, conversation=f"conv-{i}") for i in range(runs)]
    provider.shutdown()
    return run_ids, list(memory.get_finished_spans())


def post(url: str, spans: Sequence[ReadableSpan]) -> None:
    """Each span in a request of its own, through the real OTLP/HTTP exporter."""
    exporter = OTLPSpanExporter(f"{url}/v1/traces", headers={"Authorization": f"Bearer {TOKEN}"})
    for span in spans:
        assert exporter.export([span]) is SpanExportResult.SUCCESS
    exporter.shutdown()


def assigned(runner: ServiceRunner) -> float:
    sample = runner.registry.get_sample_value(
        "runtrail_assigned_partitions", {"service": "otlp-mapper"}
    )
    return sample or 0.0


def url_of(running: OtlpIngestReceiver) -> str:
    return f"http://127.0.0.1:{running.port}"


# --- what was written -------------------------------------------------------------------------
def written(settings: Settings, events: int) -> list[Any]:
    """Every record on the events topic, once ``events`` distinct events (by eventId) are."""
    found: list[Any] = []

    def enough() -> bool:
        total = sum(end_offsets(settings.bootstrap_servers, settings.events_topic, 2).values())
        if total < events:
            return False
        found[:] = consume_all(
            settings.bootstrap_servers, settings.events_topic, expect=total, timeout=30
        )
        return len({CODEC.decode(m.value()).event.event_id for m in found}) >= events

    wait_for(enough, 120, 1.0, what=f"{events} distinct events")
    return found


def as_services_read(
    messages: list[Any], notes: list[str] | None = None
) -> tuple[dict[str, list[Any]], Counter[str]]:
    """Each run's events as a service takes them (the runtime's sequence checks, in partition
    order: duplicates skipped, conflicts dropped), and the verdicts; ``notes`` gets a line per
    event that is not its run's next (where it is, what it is, the eventId it met there)."""
    checker = SequenceChecker()
    verdicts: Counter[str] = Counter()
    runs: dict[str, list[Any]] = {}
    for msg in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        event = CODEC.decode(msg.value()).event
        at = (msg.partition(), event.tenant_id, event.run_id, event.sequence)
        held_by = checker.holder(*at)
        verdict = checker.check(*at, event.event_id)
        verdicts[verdict.value] += 1
        if notes is not None and verdict is not Verdict.NEXT:
            notes.append(
                f"{verdict.value}: events[{msg.partition()}]@{msg.offset()} run {event.run_id} "
                f"#{event.sequence} {event.type} {event.event_id} (held by {held_by})"
            )
        if verdict not in (Verdict.DUPLICATE, Verdict.CONFLICT):
            runs.setdefault(event.run_id, []).append(event)
    return runs, verdicts


def what_happened(messages: list[Any], *logs: Path) -> str:
    """For a failure: each event a service would not take as its run's next, then the logs."""
    lines: list[str] = []
    as_services_read(messages, lines)
    for log in logs:
        lines += [f"--- {log.name}", log.read_text()[-6000:] if log.exists() else "(none)"]
    return "\n".join(lines)


def one_receiver(
    spans: Sequence[ReadableSpan], run_id: str
) -> list[tuple[str, str | None, int | None]]:
    """What one receiver in mode map makes of the run's spans, one request per span:
    (type, turn, step) in sequence order."""
    mapper_ = TraceMapper()
    out: list[tuple[str, str | None, int | None]] = []
    for span in spans:
        view = span_view(span)
        assert view is not None
        if view.trace_id == run_id:
            out.extend((e.event_type, e.turn_id, e.step) for e in mapper_.map([view]).events)
    return out


def shape(events: list[Any]) -> list[tuple[str, str | None, int | None]]:
    return [(e.type, e.turn_id, e.step) for e in events]


def assert_mapped_once(
    runs: dict[str, list[Any]], run_ids: list[str], spans: Sequence[ReadableSpan]
) -> None:
    for run_id in run_ids:
        events = runs[run_id]
        assert [e.sequence for e in events] == list(range(1, EVENTS_PER_RUN + 1))
        assert shape(events) == one_receiver(spans, run_id)
        assert {e.tenant_id for e in events} == {"acme"}


def no_dead_letters(settings: Settings) -> bool:
    return sum(end_offsets(settings.bootstrap_servers, settings.dlq_topic, 1).values()) == 0


# --- the tests --------------------------------------------------------------------------------
def test_a_trace_split_over_two_receivers_is_one_run_as_one_receiver_would_map_it(
    settings: Settings, tmp_path: Path
) -> None:
    run_ids, spans = traced(2)
    with (
        receiver(settings, tmp_path / "spool-a") as a,
        receiver(settings, tmp_path / "spool-b") as b,
        mapper(settings),
    ):
        for index, span in enumerate(spans):  # half to each, as a load balancer would
            sent_to = (a, b)[index % 2]
            post(url_of(sent_to), [span])
            assert sent_to.publisher.flush(10) == 0
        runs, verdicts = as_services_read(written(settings, 2 * EVENTS_PER_RUN))
    assert_mapped_once(runs, run_ids, spans)
    assert verdicts == Counter({"next": 2 * EVENTS_PER_RUN})
    assert no_dead_letters(settings)


def test_a_mapper_killed_mid_trace_and_started_again_loses_and_doubles_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    run_ids, spans = traced(6)
    first = [s for s in spans if s.name.startswith("chat") or s.name.startswith("execute_tool")]
    rest = [s for s in spans if s not in first]
    env = env_of(settings, tmp_path / "mapper-spool")
    log = tmp_path / "mapper.log"
    args = ["run", "otlp-mapper", "--metrics-port", "0"]
    with receiver(settings, tmp_path / "spool") as a:
        post(url_of(a), first)  # every trace open: model and tool spans, no root yet
        killed = process(args, env, log)
        try:
            # the mapper published for open traces: its commit is held at their first records
            wait_for(
                lambda: (
                    sum(end_offsets(settings.bootstrap_servers, settings.events_topic, 2).values())
                    >= 6 * 6
                ),
                60,
                what="events of the open traces",
            )
        finally:
            kill(killed)
        post(url_of(a), rest)
        again = process(args, env, log)
        try:
            messages = written(settings, 6 * EVENTS_PER_RUN)
        finally:
            again.send_signal(signal.SIGTERM)
            assert again.wait(30) == 0, log.read_text()[-3000:]
    runs, verdicts = as_services_read(messages)
    assert_mapped_once(runs, run_ids, spans)
    assert verdicts["conflict"] == 0 and verdicts["gap"] == 0 and verdicts["reordered"] == 0
    assert verdicts["next"] == 6 * EVENTS_PER_RUN
    assert verdicts["duplicate"] >= 6 * 6  # the replay wrote them again, under the same IDs
    assert no_dead_letters(settings)


def test_two_mappers_share_the_partitions_and_each_trace_is_mapped_once(
    settings: Settings, tmp_path: Path
) -> None:
    run_ids, spans = traced(8)
    with mapper(settings) as one, mapper(settings) as two:
        for runner in (one, two):
            wait_for(
                lambda r=runner: assigned(r) > 0,
                60,
                what="both mappers assigned",
            )
        with receiver(settings, tmp_path / "spool") as a:
            post(url_of(a), spans)
        messages = written(settings, 8 * EVENTS_PER_RUN)
        assert one.checkpoint.positions() and two.checkpoint.positions()
        assert not set(one.checkpoint.positions()) & set(two.checkpoint.positions())
    runs, verdicts = as_services_read(messages)
    assert_mapped_once(runs, run_ids, spans)
    assert verdicts["conflict"] == 0
    assert no_dead_letters(settings)


def test_the_commit_reaches_the_end_once_traces_ended_and_other_traces_hold_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    """Commits are held only for what a replay needs: once the run ended (and its linger
    passed, by the clock on an idle partition) and beside a trace of an HTTP service alone
    (no GenAI span: nothing kept), the group's commit is the end of the raw topic."""
    run_ids, spans = traced(1)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("tests.http").start_as_current_span("GET /health"):
        pass
    provider.shutdown()
    raw, group = settings.otlp_raw_topic, str(settings.group)

    def committed_to_the_end() -> bool:
        ends = end_offsets(settings.bootstrap_servers, raw, RAW_PARTITIONS)
        committed = committed_offsets(settings.bootstrap_servers, group, raw, RAW_PARTITIONS)
        return all(committed[p] == end for p, end in ends.items() if end > 0)

    with receiver(settings, tmp_path / "spool") as a, mapper(settings, ended_linger_ms="0"):
        post(url_of(a), [*memory.get_finished_spans(), *spans])
        runs, _ = as_services_read(written(settings, EVENTS_PER_RUN))
        wait_for(committed_to_the_end, 30, 0.5, what="the commit at the end of the raw topic")
    assert_mapped_once(runs, run_ids, spans)


def test_a_trace_silent_past_its_idle_bound_goes_on_numbering_also_in_a_new_mapper(
    settings: Settings, tmp_path: Path
) -> None:
    """The mapper forgets a trace silent for ``trace_idle_ms`` (its commit moves on); the trace
    speaks again, to a mapper started after that commit: the run's sequence goes on from the
    trace ledger, no conflict, no gap."""
    run_ids, spans = traced(1)
    first = [s for s in spans if s.name.startswith(("chat", "execute_tool"))]
    http = [s for s in spans if s.name.startswith("GET")]
    root = [s for s in spans if s.name.startswith("invoke_agent")]
    env = env_of(settings, tmp_path / "mapper-spool")
    env |= {
        "RUNTRAIL_OTLP_MAPPER_TRACE_IDLE_MS": "1500",
        "RUNTRAIL_OTLP_MAPPER_ENDED_LINGER_MS": "0",
    }
    args = ["run", "otlp-mapper", "--metrics-port", "0"]
    raw, group = settings.otlp_raw_topic, str(settings.group)

    def committed_to_the_end() -> bool:
        ends = end_offsets(settings.bootstrap_servers, raw, RAW_PARTITIONS)
        committed = committed_offsets(settings.bootstrap_servers, group, raw, RAW_PARTITIONS)
        return all(committed[p] == end for p, end in ends.items() if end > 0)

    with receiver(settings, tmp_path / "spool") as a:
        forgetting = process(args, env, tmp_path / "mapper.log")
        try:
            post(url_of(a), first)
            written(settings, 9)  # the open run, up to its second model call
            time.sleep(2)  # silent past trace_idle_ms: its next record makes the mapper forget it
            post(url_of(a), http)
            wait_for(committed_to_the_end, 30, 0.5, what="the commit past the forgotten trace")
        finally:
            kill(forgetting)
        fresh = process(args, env, tmp_path / "mapper.log")
        try:
            post(url_of(a), root)
            messages = written(settings, 12)
        finally:
            fresh.send_signal(signal.SIGTERM)
            fresh.wait(30)
    runs, verdicts = as_services_read(messages)
    events = runs[run_ids[0]]
    assert [e.sequence for e in events] == list(range(1, 13))
    # the run opens again where it stopped (its turns were forgotten) and ends
    assert [e.type for e in events[9:]] == [
        "run.accepted",
        "run.state_transitioned",
        "run.succeeded",
    ]
    assert verdicts["conflict"] == verdicts["gap"] == 0
    assert no_dead_letters(settings)


def test_broker_down_a_forwarding_receiver_still_answers_200_and_spools(
    settings: Settings, tmp_path: Path
) -> None:
    """As in mode map: a span the broker cannot take now is accepted (200) into the durable
    spool, never bounced back to the sender; the receiver's next start sends it, in order."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    down = settings.model_copy(update={"bootstrap_servers": dead, "delivery_timeout_ms": 1000})
    run_ids, spans = traced(1)
    with receiver(down, tmp_path / "spool") as a:
        post(url_of(a), spans)
        wait_for(lambda: a.publisher.stats().spool_depth == len(spans), 20, what="spooled")
    with receiver(settings, tmp_path / "spool") as again, mapper(settings):
        assert again.publisher.drain(30)
        runs, verdicts = as_services_read(written(settings, EVENTS_PER_RUN))
    assert_mapped_once(runs, run_ids, spans)
    assert verdicts == Counter({"next": EVENTS_PER_RUN})


def members(settings: Settings) -> int:
    """How many members the mapper group has now."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    future = admin.describe_consumer_groups([str(settings.group)])[str(settings.group)]
    try:
        return len(future.result(10).members)
    except Exception:
        return 0


def test_two_receivers_two_mappers_one_killed_mid_load_every_span_mapped_once(
    settings: Settings, tmp_path: Path
) -> None:
    """The issue's scale-out test: each trace's spans split across two receivers, two mapper
    processes, one SIGKILLed while traces are open; the other takes its partitions over."""
    run_ids, spans = traced(8)
    first = [s for s in spans if s.name.startswith(("chat", "execute_tool"))]
    rest = [s for s in spans if s not in first]
    env = env_of(settings, tmp_path / "mapper-spool")
    args = ["run", "otlp-mapper", "--metrics-port", "0"]
    survivor = process(args, env, tmp_path / "survivor.log")
    doomed = process(args, env, tmp_path / "doomed.log")
    try:
        wait_for(lambda: members(settings) == 2, 60, 0.5, what="two mappers in the group")
        with (
            receiver(settings, tmp_path / "spool-a") as a,
            receiver(settings, tmp_path / "spool-b") as b,
        ):

            def split(batch: list[ReadableSpan]) -> None:
                for index, span in enumerate(batch):
                    sent_to = (a, b)[index % 2]
                    post(url_of(sent_to), [span])
                    assert sent_to.publisher.flush(10) == 0

            split(first)
            wait_for(
                lambda: (
                    sum(end_offsets(settings.bootstrap_servers, settings.events_topic, 2).values())
                    >= 8 * 9
                ),
                60,
                what="the open traces' events, from both mappers",
            )
            kill(doomed)
            split(rest)
            messages = written(settings, 8 * EVENTS_PER_RUN)
    finally:
        if doomed.poll() is None:
            kill(doomed)
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(30) == 0, (tmp_path / "survivor.log").read_text()[-3000:]
    runs, verdicts = as_services_read(messages)
    evidence = what_happened(messages, tmp_path / "survivor.log", tmp_path / "doomed.log")
    assert verdicts["conflict"] == verdicts["gap"] == verdicts["reordered"] == 0, evidence
    assert_mapped_once(runs, run_ids, spans)
    assert verdicts["next"] == 8 * EVENTS_PER_RUN
    assert no_dead_letters(settings)


def test_log_records_survive_the_kill_of_the_receiver_that_took_them(
    settings: Settings, tmp_path: Path
) -> None:
    """A model span's content came as a log record to a receiver killed right after its 200;
    the span comes later through another receiver: the model node has the content."""
    memory = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    port, metrics = free_port(), free_port()
    env = env_of(settings, tmp_path / "spool-a")
    log = tmp_path / "receiver-a.log"
    args = ["run", "otlp-ingest", "--metrics-port", str(metrics), "-o", "mode=forward"]
    args += ["-o", f"http_port={port}", "-o", f"tokens={json.dumps({'acme': TOKEN})}"]
    doomed = process(args, env, log)
    try:
        wait_for(lambda: ready(metrics), 60, what="receiver A ready")
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(
            SimpleLogRecordProcessor(
                OTLPLogExporter(
                    f"http://127.0.0.1:{port}/v1/logs",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
            )
        )
        tracer = tracer_provider.get_tracer("tests.logs")
        logger = logger_provider.get_logger("tests.logs")
        with tracer.start_as_current_span(
            "invoke_agent bot", attributes={"gen_ai.operation.name": "invoke_agent"}
        ) as agent:
            run_id = f"{agent.get_span_context().trace_id:032x}"
            with tracer.start_as_current_span(
                "chat gpt-test",
                attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test"},
            ):
                logger.emit(
                    event_name="gen_ai.user.message",
                    body={"content": "weather in Oslo?"},
                    attributes={"gen_ai.system": "openai"},
                )
        logger_provider.shutdown()  # each record was answered 200 when emitted
    finally:
        kill(doomed)
    tracer_provider.shutdown()
    # the receiver comes back on its spool (a pod on its volume) and sends what it had not
    again = process(args, env, log)
    try:
        wait_for(lambda: ready(metrics), 60, what="receiver A ready again")
        raw = settings.otlp_raw_topic
        wait_for(
            lambda: sum(end_offsets(settings.bootstrap_servers, raw, RAW_PARTITIONS).values()) >= 1,
            30,
            what="the log record on the raw topic",
        )
        with receiver(settings, tmp_path / "spool-b") as b, mapper(settings):
            post(url_of(b), memory.get_finished_spans())
            runs, _ = as_services_read(written(settings, 6))
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(30)
    request = next(e for e in runs[run_id] if e.type == "MODEL_REQUEST")
    assert request.json_form()["data"]["prompt"]["messages"] == [
        {"role": "user", "content": "weather in Oslo?"}
    ]
    assert no_dead_letters(settings)


def test_the_mappers_drops_are_kept_per_run_and_counted_once_across_a_replay(
    settings: Settings, tmp_path: Path
) -> None:
    """An open trace's records are mapped again by the next mapper (its commit is held at the
    trace's first record): its drops, already in the store, are not counted a second time."""
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import OTLP_DROPS

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.drops")
    with tracer.start_as_current_span(
        "invoke_agent bot", attributes={"gen_ai.operation.name": "invoke_agent"}
    ) as agent:
        run_id = f"{agent.get_span_context().trace_id:032x}"
        with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
            pass
        for name in ("GET /a", "GET /b"):
            with tracer.start_as_current_span(name, attributes={"http.method": "GET"}):
                pass
    provider.shutdown()
    by_name = {s.name: s for s in memory.get_finished_spans()}
    raw, group = settings.otlp_raw_topic, str(settings.group)
    store = open_store(OTLP_DROPS, settings.resolved_otlp_drops_url())

    def counts() -> dict[str, int]:
        return {r.reason: r.count for r in store.rows(tenant="acme", run_id=run_id)}

    def committed_to_the_end() -> bool:
        ends = end_offsets(settings.bootstrap_servers, raw, RAW_PARTITIONS)
        committed = committed_offsets(settings.bootstrap_servers, group, raw, RAW_PARTITIONS)
        return all(committed[p] == end for p, end in ends.items() if end > 0)

    expected = {"not-genai": 2, "model-without-content": 1}
    try:
        with receiver(settings, tmp_path / "spool") as a:
            with mapper(settings, ended_linger_ms="0"):
                post(url_of(a), [by_name["chat m"], by_name["GET /a"], by_name["GET /b"]])
                wait_for(lambda: counts() == expected, 60, 0.5, what="the open trace's drops")
            # the trace is open: the next mapper maps its three records again, then the root
            with mapper(settings, ended_linger_ms="0"):
                post(url_of(a), [by_name["invoke_agent bot"]])
                runs, _ = as_services_read(written(settings, 6))
                assert runs[run_id][-1].type == "run.succeeded"
                wait_for(committed_to_the_end, 30, 0.5, what="the commit past the replay")
        assert counts() == expected
        assert {r.sample for r in store.rows(run_id=run_id, tenant="acme")} == {"GET /a", "chat m"}
    finally:
        store.close()
