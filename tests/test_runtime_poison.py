"""No single event stops a service: the poison corpus, handler errors, oversized dead letters,
and dead letters that keep the original bytes and headers — all against the real broker.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from runtrail.audit import verify_stored
from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.events.jsonform import canonical_bytes_reference
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.runtime import Delivered, Service, ServiceContext
from runtrail.runtime.deadletter import (
    H_OFFSET,
    H_REASON,
    H_VALUE_SHA256,
    H_VALUE_SIZE,
)
from runtrail.runtime.runner import ServiceRunner
from tests.poison_corpus import (
    big_topic_config,
    corpus_records,
    dead_letters_by_offset,
    outcome_failures,
    produce_records,
    raw_encode,
)
from tests.projector_support import sqlite_url, stored_offsets
from tests.support import (
    ServiceProcess,
    consume_all,
    create_topic,
    end_offsets,
    form,
    read_lines,
    unique_topic,
    wait_for,
)

pytestmark = pytest.mark.kafka

#: runtime dead letters of the corpus: random bytes, garbage, depths 250/400/5000, inf, 1e999
CORPUS_DEAD = 7


def _big_topics(bootstrap: str, prefix: str) -> str:
    topic = create_topic(bootstrap, unique_topic(prefix), partitions=1, **big_topic_config())
    create_topic(bootstrap, f"{topic}.dlq", partitions=1, **big_topic_config())
    return topic


def _run_corpus(
    bootstrap: str,
    tmp_path: Path,
    service: str,
    options: dict[str, str],
    done: Any,
) -> tuple[list[Any], list[int], dict[int, str], ServiceProcess]:
    topic = _big_topics(bootstrap, f"corpus-{service}")
    records = corpus_records()
    offsets = produce_records(bootstrap, topic, records)
    proc = ServiceProcess(
        service,
        bootstrap,
        topic,
        group=f"g-{topic}",
        options=options,
        log_path=tmp_path / "svc.log",
    )
    try:
        wait_for(lambda: done(topic, offsets[-1] + 1), 180, what=f"{service} through the corpus")
        dead = consume_all(bootstrap, f"{topic}.dlq", expect=CORPUS_DEAD, timeout=60)
        assert proc.alive(), (tmp_path / "svc.log").read_text()[-3000:]
        return records, offsets, dead_letters_by_offset(dead, service), proc
    except BaseException:
        proc.close()
        raise


def test_the_corpus_through_noop(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "noop.out"

    def processed() -> set[int]:
        return {int(line.split(" ")[2]) for line in read_lines(out)}

    def done(topic: str, end: int) -> bool:
        return end - 1 in processed()  # the last canary

    records, offsets, dead, proc = _run_corpus(
        kafka_bootstrap, tmp_path, "noop", {"output": str(out)}, done
    )
    try:
        assert outcome_failures(records, offsets, processed(), dead) == []
        assert len(dead) == CORPUS_DEAD
        assert proc.terminate() == 0
    finally:
        proc.close()


def test_the_corpus_through_the_projector(kafka_bootstrap: str, tmp_path: Path) -> None:
    db = tmp_path / "projection.db"

    def done(topic: str, end: int) -> bool:
        return stored_offsets(db, topic, 1).get(0) == end

    records, offsets, dead, proc = _run_corpus(
        kafka_bootstrap, tmp_path, "projector", {"store_url": sqlite_url(db)}, done
    )
    try:
        assert proc.terminate() == 0
    finally:
        proc.close()
    store = open_store(PROJECTIONS, sqlite_url(db))
    try:
        processed = set()
        for record, offset in zip(records, offsets, strict=True):
            stored = store.get(record.tenant, record.run_id) if record.run_id else None
            # applied: the run's projection reached the item's sequence
            if stored is not None and stored.version >= record.sequence:
                processed.add(offset)
        for record in records:
            if record.must_process:
                stored = store.get(record.tenant, record.run_id)
                assert stored is not None and stored.version >= 1, record.name
                if stored.run_id.startswith("canary"):
                    assert not stored.halted, record.name
    finally:
        store.close()
    assert outcome_failures(records, offsets, processed, dead) == []


def test_the_corpus_through_audit(kafka_bootstrap: str, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "audit.db")

    def done(topic: str, end: int) -> bool:
        if not (tmp_path / "audit.db").exists():
            return False
        store = open_store(AUDIT_LINKS, url)
        try:
            return store.stored_offsets(topic, [0]).get(0, 0) >= end
        finally:
            store.close()

    records, offsets, dead, proc = _run_corpus(
        kafka_bootstrap,
        tmp_path,
        "audit",
        {"store_url": url, "publish": "false", "tree_head_interval_s": "0"},
        done,
    )
    try:
        assert proc.terminate() == 0
    finally:
        proc.close()
    store = open_store(AUDIT_LINKS, url)
    codec = EventCodec()
    try:
        processed = set()
        for record, offset in zip(records, offsets, strict=True):
            link = store.find_event(record.tenant, record.event_id) if record.event_id else None
            if link is None:
                continue
            processed.add(offset)
            # sealed as written (5 MB, a megabyte of escapes): the bytes the rfc8785 package
            # makes of the form the Python path decodes, and a chain that verifies
            written = canonical_bytes_reference(codec.decode_written(record.value))
            assert link.canonical() == written, record.name
            assert verify_stored(store, record.tenant, record.run_id).valid, record.name
    finally:
        store.close()
    assert outcome_failures(records, offsets, processed, dead) == []


# --- in-process: a service that raises, a service that dead-letters --------------------------


class Picky(Service):
    """Raises for events whose message is ``boom`` (or nests too deep to walk); keeps the rest
    by eventId (so a batch run again is applied once)."""

    name = "picky"

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.seen: dict[str, Delivered] = {}
        self.batches = 0

    def process(self, batch: Sequence[Delivered]) -> None:
        self.batches += 1
        for d in batch:
            message = d.written["data"].get("message")
            if message == "boom":
                raise ValueError(f"cannot take event {d.event.event_id}")
            if message == "recurse":
                _recurse(0)
        self.seen.update((d.event.event_id, d) for d in batch)


def _recurse(n: int) -> int:
    return _recurse(n + 1) + 1


class Refusing(Service):
    """Dead-letters every event it gets (as a service rejecting an event would)."""

    name = "refusing"

    def process(self, batch: Sequence[Delivered]) -> None:
        for d in batch:
            self.context.dead_letter(d, "refused-by-test", "this service refuses everything")


class Running:
    def __init__(self, runner: ServiceRunner) -> None:
        self.runner = runner
        self.status: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.status = self.runner.run()

    def stop(self) -> int | None:
        self.runner.request_stop()
        self.thread.join(60)
        return self.status


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("picky"), partitions=1)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=1)
    return name


def _runner(bootstrap: str, topic: str, factory: Any, name: str) -> Iterator[Running]:
    settings = Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        commit_interval_ms=100,
        batch_timeout_ms=100,
        group=f"g-{topic}",
    )
    running = Running(ServiceRunner(factory, settings, service_name=name, metrics_port=0))
    try:
        yield running
    finally:
        assert running.stop() == 0


def _produce(
    bootstrap: str, topic: str, items: list[tuple[bytes, bytes, list[tuple[str, bytes]] | None]]
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for key, value, headers in items:
        producer.produce(topic, value=value, key=key, headers=headers, partition=0)
    assert producer.flush(30) == 0


def test_an_event_the_handler_raises_for_is_dead_lettered_and_the_rest_go_on(
    kafka_bootstrap: str, topic: str
) -> None:
    from tests.support import encode

    forms = [
        form(run_id="r", sequence=s, data={"message": f"m{s}", "raw": None}) for s in range(1, 11)
    ]
    forms[3]["data"]["message"] = "boom"
    forms[6]["data"]["message"] = "recurse"
    canary = form(run_id="r", sequence=11)
    # one produce batch: the poison arrives inside a batch with good events around it
    _produce(kafka_bootstrap, topic, [(b"r", encode(f), None) for f in [*forms, canary]])
    gen = _runner(kafka_bootstrap, topic, Picky, "picky")
    running = next(gen)
    try:
        service = running.runner.service
        wait_for(lambda: canary["eventId"] in service.seen, 60, what="the canary")
        dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=2, timeout=30)
        by_offset = {int(dict(m.headers())[H_OFFSET]): dict(m.headers()) for m in dead}
        assert set(by_offset) == {3, 6}
        assert by_offset[3][H_REASON] == b"handler-error"
        assert b"ValueError: cannot take event" in by_offset[3]["rt.error.detail"]
        assert by_offset[6][H_REASON] == b"too-deep"
        good = {f["eventId"] for i, f in enumerate([*forms, canary]) if i not in (3, 6)}
        assert set(service.seen) == good
        assert running.status is None and running.thread.is_alive()  # still running
    finally:
        with pytest.raises(StopIteration):
            next(gen)


def test_a_dead_letter_keeps_the_consumed_bytes_and_headers(
    kafka_bootstrap: str, topic: str
) -> None:
    # bytes a non-Python writer produced: JSON text with spaces and escaped unicode, which
    # orjson would write as {"a":"é","n":[1,2]}
    f = form(run_id="foreign", sequence=1, data={"message": "hi", "raw": None})
    value = raw_encode(f, {"raw": '{ "a" : "\\u00e9",  "n" : [1, 2] }'})
    headers = [
        ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("rt.writer", b"go-client/1.2"),
    ]
    _produce(kafka_bootstrap, topic, [(b"foreign", value, headers)])
    gen = _runner(kafka_bootstrap, topic, Refusing, "refusing")
    next(gen)
    try:
        dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=60)
        assert len(dead) == 1
        msg = dead[0]
        assert msg.value() == value  # byte-identical
        assert msg.key() == b"foreign"
        got = msg.headers()
        assert got[:2] == headers  # the original headers, first and in order
        assert dict(got)[H_REASON] == b"refused-by-test"
    finally:
        with pytest.raises(StopIteration):
            next(gen)


def test_a_dead_letter_too_large_for_the_dlq_goes_as_a_digest(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    import hashlib

    from tests.support import encode

    # the events topic takes 3 MB, the DLQ is left at the broker's 1 MB default
    topic = create_topic(
        kafka_bootstrap, unique_topic("digest"), partitions=1, **big_topic_config()
    )
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    # not Avro, and incompressible: dead letters are compressed like every runtrail record
    garbage = b"not avro " + os.urandom(2_700_000)
    canary = form(run_id="after", sequence=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 4_000_000})
    producer.produce(topic, value=garbage, key=b"g", partition=0)
    producer.produce(topic, value=encode(canary), key=b"after", partition=0)
    assert producer.flush(30) == 0
    out = tmp_path / "noop.out"
    proc = ServiceProcess(
        "noop",
        kafka_bootstrap,
        topic,
        group=f"g-{topic}",
        options={"output": str(out)},
        log_path=tmp_path / "svc.log",
    )
    try:
        wait_for(
            lambda: any(canary["eventId"] in line for line in read_lines(out)), 60, what="canary"
        )
        dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=60)
        assert len(dead) == 1
        headers = dict(dead[0].headers())
        assert dead[0].value() is None
        assert headers[H_REASON] == b"undecodable"
        assert headers[H_VALUE_SIZE] == str(len(garbage)).encode()
        assert headers[H_VALUE_SHA256] == hashlib.sha256(garbage).hexdigest().encode()
        assert proc.alive()
        wait_for(lambda: end_offsets(kafka_bootstrap, topic, 1) == {0: 2}, 60, what="end offsets")
        assert proc.terminate() == 0
    finally:
        proc.close()
