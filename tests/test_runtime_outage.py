"""A broker SIGKILLed under running services: they keep their PIDs, say 503, catch up.

The broker of this test (``restartable_broker``) is killed with SIGKILL while noop (``-o
output=FILE``: one fsynced line per event, written before the commit), the projector and audit
(SQLite stores holding their offsets) consume. No service may exit; each answers 503 on
``/readyz`` while the broker is gone, and once it is back each processes everything produced
before, during and after the outage: nothing missing, nothing doubled (noop's lines, the
projector's run versions, audit's chains).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from runtrail.config import Settings
from runtrail.kafka.producer_config import dead_letter_config
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.runtime.deadletter import H_OFFSET, H_SERVICE, H_VALUE_SIZE, DeadLetterProducer
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail_tools.kafka.broker import LocalBroker
from tests.projector_support import sqlite_url, stored_offsets
from tests.support import (
    ServiceProcess,
    committed_offsets,
    consume_all,
    create_topic,
    encode,
    end_offsets,
    form,
    produce_forms,
    read_lines,
    unique_topic,
    wait_for,
)

pytestmark = pytest.mark.kafka
PARTITIONS = 3


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _kill(broker: LocalBroker) -> None:
    pid = broker.pid
    assert pid is not None, "the broker is not running"
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: broker.pid is None, 20, what="the broker to die")


def _forms(count: int, tag: str, runs: int = 30) -> list[dict[str, object]]:
    """``runs`` runs (each opened by run.accepted, so the projector can apply them)."""
    out = []
    for i in range(count):
        run, seq = f"{tag}-{i % runs}", i // runs + 1
        if seq == 1:
            data = {"goalRef": "goal://1", "policyVersion": "p-1"}
            out.append(form("run.accepted", run_id=run, sequence=1, data=data))
        else:
            out.append(form(run_id=run, sequence=seq))
    return out


def _produce_patiently(
    bootstrap: str, topic: str, forms: list[dict[str, Any]], poison: bool = True
) -> None:
    """Publish while the broker may be down: librdkafka holds the messages until it is back
    (with ``poison``, a garbage value after every 500th form from the 250th)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "message.timeout.ms": 600_000,
        }
    )
    for i, f in enumerate(forms):
        producer.produce(topic, value=encode(f), key=str(f["runId"]))
        if poison and i % 500 == 250:  # its dead letter is produced into the outage
            producer.produce(topic, value=b"garbage " + str(i).encode(), key=str(f["runId"]))
        producer.poll(0)
        time.sleep(0.002)
    assert producer.flush(300) == 0


def _services(bootstrap: str, topic: str, tmp_path: Path) -> dict[str, ServiceProcess]:
    options = {
        "noop": {"output": str(tmp_path / "noop.out")},
        "projector": {"store_url": sqlite_url(tmp_path / "projection.db")},
        "audit": {
            "store_url": sqlite_url(tmp_path / "audit.db"),
            "publish": "false",  # the audit topic's outage handling is tested with it (A2)
            "tree_head_interval_s": "0",
        },
    }
    return {
        name: ServiceProcess(
            name,
            bootstrap,
            topic,
            group=f"{name}-{topic}",
            options=opts,
            # a long commit interval: the kill lands with events flushed but not committed
            env={"RUNTRAIL_BATCH_SIZE": "200", "RUNTRAIL_COMMIT_INTERVAL_MS": "3000"},
            log_path=tmp_path / f"{name}.log",
        )
        for name, opts in options.items()
    }


def _audit_offsets(url: str, topic: str) -> dict[int, int]:
    store = open_store(AUDIT_LINKS, url)
    try:
        return store.stored_offsets(topic, range(PARTITIONS))
    finally:
        store.close()


def _outage(restartable_broker: LocalBroker, tmp_path: Path, down_s: float) -> None:
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("outage"), partitions=PARTITIONS)
    create_topic(bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    before, during, after = _forms(3000, "a"), _forms(1500, "b"), _forms(1000, "c")
    produce_forms(bootstrap, topic, before)
    out = tmp_path / "noop.out"
    projection_db, audit_url = tmp_path / "projection.db", sqlite_url(tmp_path / "audit.db")
    procs = _services(bootstrap, topic, tmp_path)

    def logs() -> str:
        return "\n".join(f"--- {n}\n{(tmp_path / f'{n}.log').read_text()[-2000:]}" for n in procs)

    try:
        ports = {name: proc.metrics_port() for name, proc in procs.items()}
        wait_for(lambda: len(read_lines(out)) >= len(before), 90, what="the first events")
        for port in ports.values():
            wait_for(lambda p=port: _status(p, "/readyz") == 200, 60, what="readiness")
        pids = {name: proc.proc.pid for name, proc in procs.items()}
        # published across the kill: some before it, most while the broker is gone
        publisher = threading.Thread(
            target=_produce_patiently, args=(bootstrap, topic, during), daemon=True
        )
        publisher.start()
        time.sleep(1.5)
        _kill(broker)
        down_at = time.monotonic()
        for name, port in ports.items():
            wait_for(lambda p=port: _status(p, "/readyz") == 503, 40, what=f"503 from {name}")
        while time.monotonic() - down_at < down_s:
            for name, proc in procs.items():
                assert proc.alive(), f"{name} exited: {logs()}"
                assert _status(ports[name], "/healthz") == 200  # the loop keeps turning
            time.sleep(1)
        assert {_status(port, "/readyz") for port in ports.values()} == {503}
        broker.start()
        publisher.join(300)
        produce_forms(bootstrap, topic, after)
        events = before + during + after
        expected = [str(f["eventId"]) for f in events]
        end = end_offsets(bootstrap, topic, PARTITIONS)
        ids = lambda: [line.split(" ", 1)[0] for line in read_lines(out)]  # noqa: E731
        wait_for(lambda: set(ids()) >= set(expected), 180, what="every event in noop's output")
        wait_for(
            lambda: stored_offsets(projection_db, topic, PARTITIONS) == end,
            180,
            what="the projector at the end",
        )
        wait_for(lambda: _audit_offsets(audit_url, topic) == end, 180, what="audit at the end")
        for name, port in ports.items():
            wait_for(lambda p=port: _status(p, "/readyz") == 200, 60, what=f"{name} ready again")
        wait_for(
            lambda: committed_offsets(bootstrap, f"noop-{topic}", topic, PARTITIONS) == end,
            60,
            what="noop committed everything",
        )
        for name, proc in procs.items():
            assert proc.alive() and proc.proc.pid == pids[name], f"{name}: {logs()}"
        seen = Counter(ids())
        assert set(seen) == set(expected)  # nothing missing, nothing foreign
        doubled = {k: c for k, c in seen.items() if c > 1}
        assert not doubled, f"{len(doubled)} events written twice"
        # each service dead-lettered the poison (at least once), none lost it
        dead = consume_all(bootstrap, f"{topic}.dlq", expect=9, timeout=60)
        for name in procs:
            values = {m.value() for m in dead if dict(m.headers())[H_SERVICE] == name.encode()}
            assert values == {b"garbage 250", b"garbage 750", b"garbage 1250"}, name
        for proc in procs.values():
            assert proc.terminate() == 0
    finally:
        for proc in procs.values():
            proc.close()
    per_run = Counter(str(f["runId"]) for f in events)
    projections = open_store(PROJECTIONS, sqlite_url(projection_db))
    try:
        assert projections.list(halted=True) == []
        for run, count in per_run.items():
            stored = projections.get("t1", run)
            assert stored is not None and stored.version == count, run
    finally:
        projections.close()
    links = open_store(AUDIT_LINKS, audit_url)
    try:
        sealed = Counter()
        for run, count in per_run.items():
            chain = links.load_chain("t1", run)
            assert [int(link.event["sequence"]) for link in chain] == list(range(1, count + 1))
            sealed.update(str(link.event["eventId"]) for link in chain)
        assert set(sealed) == set(expected) and max(sealed.values()) == 1
    finally:
        links.close()


def test_broker_sigkill_45s_service_keeps_pid_and_catches_up(
    restartable_broker: LocalBroker, tmp_path: Path
) -> None:
    _outage(restartable_broker, tmp_path, 45)


def test_dead_letters_wait_for_the_broker_and_are_sent_again(
    restartable_broker: LocalBroker,
) -> None:
    """Undelivered dead letters make flush() raise StoreUnavailable (waited out), never
    DeadLetterError (fatal); those that timed out are produced again once the broker is back."""
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    dlq = create_topic(bootstrap, unique_topic("dlq"), partitions=1)
    config = dead_letter_config(Settings(bootstrap_servers=bootstrap), 8 * 1024 * 1024)
    producer = DeadLetterProducer({**config, "message.timeout.ms": 3000}, dlq, "test")
    _kill(broker)
    for i in range(3):
        _dead_letter(producer, i, f"poison {i}".encode(), [("traceparent", b"00-abc-def-01")])
    with pytest.raises(StoreUnavailable) as first:
        producer.flush(timeout=1.0)  # still queued
    assert first.value.what == f"dead-letter topic {dlq}"
    time.sleep(4)  # past message.timeout.ms: the client gives them up (_MSG_TIMED_OUT)
    with pytest.raises(StoreUnavailable):
        producer.flush(timeout=1.0)  # kept, produced again, still no broker
    broker.start()
    wait_for(lambda: _flushed(producer), 60, 1.0, what="the dead letters delivered")
    dead = consume_all(bootstrap, dlq, expect=3, timeout=30)
    assert sorted(m.value() for m in dead) == [b"poison 0", b"poison 1", b"poison 2"]
    assert all(dict(m.headers())["traceparent"] == b"00-abc-def-01" for m in dead)
    producer.close()


def test_dead_letters_beside_one_too_large_for_the_topic_keep_their_values(
    kafka_bootstrap: str,
) -> None:
    """The broker refuses a whole batch over the topic's ``max.message.bytes`` and every dead
    letter in it gets the size error: only the large one may lose its value to a digest."""
    dlq = create_topic(
        kafka_bootstrap, unique_topic("dlq"), partitions=1, **{"max.message.bytes": "2000"}
    )
    config = dead_letter_config(Settings(bootstrap_servers=kafka_bootstrap), 8 * 1024 * 1024)
    producer = DeadLetterProducer(config, dlq, "test")
    large = os.urandom(5000)  # incompressible: the producer compresses batches
    for offset, value in enumerate([b"before", large, b"after"]):
        _dead_letter(producer, offset, value)
    producer.flush(timeout=30)
    producer.close()
    dead = sorted(consume_all(kafka_bootstrap, dlq, expect=3, timeout=30), key=lambda m: m.offset())
    by_offset = {dict(m.headers())[H_OFFSET]: m for m in dead}
    assert [by_offset[o].value() for o in (b"0", b"2")] == [b"before", b"after"]
    assert by_offset[b"1"].value() is None
    assert dict(by_offset[b"1"].headers())[H_VALUE_SIZE] == b"5000"
    assert producer.replaced == 1


def _dead_letter(
    producer: DeadLetterProducer,
    offset: int,
    value: bytes,
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    """Send the dead letter of an undecodable message at ``offset`` of ``events``[0]."""
    producer.send(
        key=b"k",
        value=value,
        headers=headers,
        source_topic="events",
        partition=0,
        offset=offset,
        timestamp_ms=0,
        reason="undecodable",
        detail="test",
    )


def _flushed(producer: DeadLetterProducer) -> bool:
    try:
        producer.flush(timeout=5.0)
    except StoreUnavailable:
        return False
    return True


def test_sigterm_during_an_outage_exits_cleanly_without_committing(
    restartable_broker: LocalBroker, tmp_path: Path
) -> None:
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("stop"), partitions=PARTITIONS)
    create_topic(bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    produce_forms(bootstrap, topic, _forms(300, "s"))
    out = tmp_path / "noop.out"
    proc = ServiceProcess(
        "noop",
        bootstrap,
        topic,
        group=f"g-{topic}",
        options={"output": str(out)},
        env={"RUNTRAIL_SHUTDOWN_TIMEOUT_S": "30"},
        log_path=tmp_path / "noop.log",
    )
    try:
        port = proc.metrics_port()
        wait_for(lambda: len(read_lines(out)) == 300, 60, what="the events")
        _kill(broker)
        wait_for(lambda: _status(port, "/readyz") == 503, 40, what="503")
        started = time.monotonic()
        status = proc.terminate(timeout=60)
        took = time.monotonic() - started
        log = (tmp_path / "noop.log").read_text()
        assert status == 0, log[-3000:]  # not the watchdog's 2
        assert took < 30, f"shutdown took {took:.0f}s"
    finally:
        proc.close()
