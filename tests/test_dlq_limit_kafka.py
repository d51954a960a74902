"""The dead-letter limit over a real broker, with real service processes (``runtrail run``; the
broken deploys are the shipped services with a ``process()`` that raises, ``tests.broken_handler``):

* audit whose ``process()`` raises for every event stops each partition within the bound (at
  most ``RUNTRAIL_DLQ_MAX_CONSECUTIVE`` handler-error dead letters per partition), paused, not
  ready, ``runtrail_dlq_limit_tripped`` 1 and one log line naming the error; restarted with the
  working handler it resumes at the first failing event: every run's chain verifies and seals
  every event, no hole;
* noop failing every other event trips the ratio bound: the group's commit stays at the event
  that tripped it, and a working noop started after it processes every event from there;
* noop failing on a few poison events among many good ones dead-letters them and goes on: the
  limit does not trip.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from runtrail.audit.store import LinkStore, verify_stored
from runtrail.persistence.registry import open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.runtime.deadletter import H_OFFSET, H_PARTITION, H_REASON
from tests.broken_handler import BROKEN_ENV
from tests.support import (
    ServiceProcess,
    committed_offsets,
    consume_all,
    create_topic,
    encode,
    end_offsets,
    form,
    read_lines,
    unique_topic,
    wait_for,
)

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[1]
TENANT = "t1"
STOPPED_LINE = "dead-letter limit: stopped consuming"


def _topic(bootstrap: str, prefix: str, partitions: int) -> str:
    topic = create_topic(bootstrap, unique_topic(prefix), partitions=partitions)
    create_topic(bootstrap, f"{topic}.dlq", partitions=partitions)
    return topic


def _produce(bootstrap: str, topic: str, items: list[tuple[int, dict[str, Any]]]) -> None:
    """Each form to the partition given, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, f in items:
        producer.produce(topic, value=encode(f), key=f["runId"], partition=partition)
    assert producer.flush(30) == 0


def _service(
    service: str,
    bootstrap: str,
    topic: str,
    log: Path,
    *,
    options: dict[str, str],
    broken: str | None = None,
    limit: dict[str, str] | None = None,
) -> ServiceProcess:
    env = {f"RUNTRAIL_{k.upper()}": v for k, v in (limit or {}).items()}
    if broken is not None:
        env |= {BROKEN_ENV: broken, "PYTHONPATH": str(ROOT)}
    return ServiceProcess(
        service,
        bootstrap,
        topic,
        group=f"g-{topic}",
        options=options,
        env=env,
        log_path=log,
        main_module="tests.broken_handler" if broken is not None else "runtrail_tools.cli.main",
    )


def _poisoned_noop(
    bootstrap: str, topic: str, log: Path, out: Path, limit: dict[str, str]
) -> ServiceProcess:
    """``runtrail run noop`` whose handler raises for runs named ``poison-*``, writing the
    offsets it processed to ``out``."""
    return _service(
        "noop", bootstrap, topic, log, options={"output": str(out)}, broken="poison", limit=limit
    )


def _tripped(proc: ServiceProcess) -> dict[int, float]:
    """``runtrail_dlq_limit_tripped`` per partition, from the process's /metrics."""
    _, text = proc.get("/metrics")
    pattern = r'^runtrail_dlq_limit_tripped\{[^}]*partition="(\d+)"[^}]*\} (\S+)$'
    return {int(p): float(v) for p, v in re.findall(pattern, text, re.M)}


def _stopped_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if STOPPED_LINE in line]


def _handler_errors(bootstrap: str, topic: str, expect: int, timeout: float) -> list[Any]:
    dead = consume_all(bootstrap, f"{topic}.dlq", expect=expect, timeout=timeout)
    return [m for m in dead if dict(m.headers())[H_REASON] == b"handler-error"]


def _where(message: Any) -> tuple[int, int]:
    headers = dict(message.headers())
    return int(headers[H_PARTITION]), int(headers[H_OFFSET])


# --- audit: everything fails, then the fixed deploy ---------------------------------------


def _sealed(url: str, topic: str) -> dict[int, int]:
    store: LinkStore = open_store("audit", url)
    try:
        return store.stored_offsets(topic, [0, 1])
    finally:
        store.close()


def test_audit_whose_handler_always_raises_stops_within_the_bound_and_resumes_without_a_hole(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic(kafka_bootstrap, "dlq-limit-audit", 2)
    url = sqlite_url(tmp_path / "audit.db")
    options = {"store_url": url, "publish": "false", "tree_head_interval_s": "0"}
    runs = {0: "run-a", 1: "run-b"}  # one run per partition
    forms: dict[str, list[dict[str, Any]]] = {
        run: [form(run_id=run, tenant=TENANT, sequence=s) for s in range(1, 26)]
        for run in runs.values()
    }
    first, rest = 5, 20
    bound = 3

    # 1. the working deploy seals the first events of each run
    _produce(
        kafka_bootstrap, topic, [(p, f) for p, run in runs.items() for f in forms[run][:first]]
    )
    working = _service("audit", kafka_bootstrap, topic, tmp_path / "1.log", options=options)
    try:
        wait_for(lambda: _sealed(url, topic) == {0: first, 1: first}, 60, what="first events")
        assert working.terminate() == 0
    finally:
        working.close()

    # 2. a bad deploy: process() raises for every event
    _produce(
        kafka_bootstrap, topic, [(p, f) for p, run in runs.items() for f in forms[run][first:]]
    )
    log = tmp_path / "2.log"
    broken = _service(
        "audit",
        kafka_bootstrap,
        topic,
        log,
        options=options,
        broken="all",
        limit={"dlq_max_consecutive": str(bound)},
    )
    try:
        wait_for(lambda: len(_stopped_lines(log)) == 2, 60, what="both partitions stopped")
        status, body = broken.get("/readyz")
        assert status == 503, body
        assert f"{topic}[0] stopped: dead-letter limit: BadDeploy" in body
        assert f"{topic}[1] stopped: dead-letter limit: BadDeploy" in body
        assert _tripped(broken) == {0: 1.0, 1: 1.0}
        # one line per partition, naming the exception, its text and where it resumes
        for partition, line in sorted((int(re.search(r"\[(\d)\]", ln)[1]), ln) for ln in _stopped_lines(log)):  # type: ignore[index]  # fmt: skip
            assert f"{topic}[{partition}] at offset {first + bound}" in line
            assert f"{bound + 1} handler errors in a row (limit {bound})" in line
            assert f"BadDeploy: cannot handle {runs[partition]}#{first + bound + 1}" in line
            assert f"nothing is committed from offset {first}, where a restart" in line
        # at most `bound` dead letters per partition: the first failing events, in order
        dead = _handler_errors(kafka_bootstrap, topic, 2 * bound + 1, timeout=15)
        assert sorted(_where(m) for m in dead) == [
            (p, o) for p in (0, 1) for o in range(first, first + bound)
        ]
        assert broken.alive()
        # it commits nothing past the first failing event: the store's position stays
        assert _sealed(url, topic) == {0: first, 1: first}
        assert broken.terminate() == 0
    finally:
        broken.close()
    assert _sealed(url, topic) == {0: first, 1: first}
    committed = committed_offsets(kafka_bootstrap, f"g-{topic}", topic, 2)
    assert all(committed[p] <= first for p in (0, 1)), committed

    # 3. the fixed deploy resumes at the first failing event: no hole in any chain
    fixed = _service("audit", kafka_bootstrap, topic, tmp_path / "3.log", options=options)
    try:
        end = first + rest
        wait_for(lambda: _sealed(url, topic) == {0: end, 1: end}, 60, what="every event sealed")
        status, _ = fixed.get("/readyz")
        assert status == 200
        assert fixed.terminate() == 0
    finally:
        fixed.close()
    store: LinkStore = open_store("audit", url)
    try:
        for run, events in forms.items():
            verdict = verify_stored(store, TENANT, run)
            assert verdict.valid and verdict.length == len(events), (run, verdict)
            chain = store.load_chain(TENANT, run)
            assert [link.event["eventId"] for link in chain] == [f["eventId"] for f in events]
    finally:
        store.close()
    # the fixed deploy dead-lettered nothing more: the dead-letter topic holds the bad
    # deploy's letters alone (its high watermarks, not a read that a loaded broker may outlast)
    assert sum(end_offsets(kafka_bootstrap, f"{topic}.dlq", 2).values()) == 2 * bound


# --- noop: the ratio bound, and the commit it leaves ----------------------------------------


def _noop_offsets(path: Path) -> list[int]:
    return [int(line.split(" ")[2]) for line in read_lines(path)]


def test_noop_failing_every_other_event_trips_the_ratio_and_resumes_from_the_event_that_tripped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic(kafka_bootstrap, "dlq-limit-ratio", 1)
    # good, poison, good, poison…: never two handler errors in a row
    items = [
        form(run_id="good", sequence=i // 2 + 1) if i % 2 == 0 else form(run_id=f"poison-{i}")
        for i in range(60)
    ]
    _produce(kafka_bootstrap, topic, [(0, f) for f in items])
    out = tmp_path / "noop.out"
    log = tmp_path / "1.log"
    # at most 4 handler errors among the last 20 offsets: the 5th (offset 9) trips it
    limit = {"dlq_max_consecutive": "100", "dlq_max_ratio": "0.2", "dlq_ratio_window": "20"}
    broken = _poisoned_noop(kafka_bootstrap, topic, log, out, limit)
    try:
        wait_for(lambda: len(_stopped_lines(log)) == 1, 60, what="the partition stopped")
        (line,) = _stopped_lines(log)
        assert "5 handler errors among its last 20 offsets (limit 4)" in line
        assert "nothing is committed from offset 9" in line and "BadDeploy" in line
        assert broken.get("/readyz")[0] == 503
        assert _tripped(broken) == {0: 1.0}
        dead = _handler_errors(kafka_bootstrap, topic, 5, timeout=15)
        assert sorted(_where(m) for m in dead) == [(0, o) for o in (1, 3, 5, 7)]
        assert broken.terminate() == 0
    finally:
        broken.close()
    assert _noop_offsets(out) == [0, 2, 4, 6, 8]
    assert committed_offsets(kafka_bootstrap, f"g-{topic}", topic, 1) == {0: 9}

    fixed = _service(
        "noop", kafka_bootstrap, topic, tmp_path / "2.log", options={"output": str(out)}
    )
    try:
        wait_for(lambda: len(_noop_offsets(out)) == 5 + 51, 60, what="every event from 9 on")
        assert fixed.terminate() == 0
    finally:
        fixed.close()
    assert _noop_offsets(out) == [0, 2, 4, 6, 8, *range(9, 60)]
    assert committed_offsets(kafka_bootstrap, f"g-{topic}", topic, 1) == {0: 60}


# --- noop: a few poison events among many good ones -----------------------------------------


def test_a_few_poison_events_among_many_are_dead_lettered_and_the_service_goes_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic(kafka_bootstrap, "dlq-limit-poison", 1)
    # two poison events in a row (the bound) every 25 offsets: 8 in any 100 (the bound is 10)
    items: list[dict[str, Any]] = []
    poison: list[int] = []
    good = 0
    while len(items) < 400:
        if len(items) % 25 == 10:
            poison += [len(items), len(items) + 1]
            items += [form(run_id=f"poison-{len(items)}"), form(run_id=f"poison-{len(items) + 1}")]
        else:
            good += 1
            items.append(form(run_id="good", sequence=good))
    _produce(kafka_bootstrap, topic, [(0, f) for f in items])
    out = tmp_path / "noop.out"
    log = tmp_path / "svc.log"
    limit = {"dlq_max_consecutive": "2", "dlq_max_ratio": "0.1", "dlq_ratio_window": "100"}
    proc = _poisoned_noop(kafka_bootstrap, topic, log, out, limit)
    try:
        wait_for(lambda: len(read_lines(out)) == good, 60, what="every good event")
        dead = _handler_errors(kafka_bootstrap, topic, len(poison), timeout=30)
        assert sorted(o for _, o in map(_where, dead)) == poison
        status, body = proc.get("/readyz")
        assert status == 200, body
        assert _tripped(proc) == {}
        assert _stopped_lines(log) == []
        assert proc.terminate() == 0
    finally:
        proc.close()
    assert sorted(_noop_offsets(out)) == sorted(set(range(len(items))) - set(poison))
    assert committed_offsets(kafka_bootstrap, f"g-{topic}", topic, 1) == {0: len(items)}
    assert end_offsets(kafka_bootstrap, topic, 1) == {0: len(items)}


def test_a_partition_stopped_in_a_batch_is_not_processed_in_the_batchs_later_chunks(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A batch larger than ``PROCESS_CHUNK`` (``RUNTRAIL_BATCH_SIZE`` 1000 here, as sessions
    takes 2,000) is processed a chunk at a time: once a chunk trips a partition's dead-letter
    limit, the batch's later chunks of that partition are left for the next start, as the
    rest of the tripping chunk is, and nothing of it is committed past the first error."""
    topic = _topic(kafka_bootstrap, "dlq-limit-chunks", 1)
    items = [form(run_id=f"poison-{i}") for i in range(6)]
    items += [form(run_id="good", sequence=i + 1) for i in range(594)]
    _produce(kafka_bootstrap, topic, [(0, f) for f in items])
    out = tmp_path / "noop.out"
    log = tmp_path / "svc.log"
    limit = {"batch_size": "1000", "dlq_max_consecutive": "3"}
    proc = _poisoned_noop(kafka_bootstrap, topic, log, out, limit)
    try:
        wait_for(lambda: len(_stopped_lines(log)) == 1, 60, what="the partition stopped")
        assert _tripped(proc) == {0: 1.0}
        assert proc.terminate() == 0
    finally:
        proc.close()
    assert _noop_offsets(out) == []  # neither the rest of its chunk nor the chunks after
    assert committed_offsets(kafka_bootstrap, f"g-{topic}", topic, 1)[0] <= 0  # none, or 0
