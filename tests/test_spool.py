"""The JSON-lines spool file of an older publisher (read to import it) and publisher spooling.

The tests marked ``kafka`` stop and start a real broker under a publisher.
"""

from __future__ import annotations

import fcntl
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.publisher import Publisher, SpoolRecord
from runtrail.publisher.legacy_spool import LegacySpoolEntry, LegacySpoolReader
from runtrail.publisher.spool_record import path_component
from runtrail_tools.kafka.broker import LocalBroker
from tests.legacy_spool import spool_line, write_legacy_spool
from tests.support import create_topic, unique_topic

CODEC = EventCodec()


def rec(n: int, key: bytes | None = b"run-1") -> SpoolRecord:
    return SpoolRecord(
        key=key,
        value=bytes([0xC3, 0x01, n % 256, 0, 0xFF]) + f"value-{n}".encode(),
        headers=(("rt.type", b"STEP_END"), ("rt.event_id", f"e{n}".encode())),
        event_id=f"e{n}",
    )


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# --- the older publisher's spool file, read to import it ----------------------------------
def entry_ids(entries: list[LegacySpoolEntry]) -> list[str | None]:
    return [e.record.event_id if e.record else None for e in entries]


def test_records_read_back_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    records = [rec(1), rec(2, key=None), SpoolRecord(b"\x00\xff", b"\x00\n\r", ())]
    write_legacy_spool(path, records)
    reader = LegacySpoolReader(path)
    assert [e.record for e in reader.read(10)] == records
    reader.close()


def test_reads_are_bounded_and_the_cursor_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    write_legacy_spool(path, [rec(n) for n in range(5)])
    reader = LegacySpoolReader(path)
    first = reader.read(2)
    assert entry_ids(first) == ["e0", "e1"]
    reader.advance(first[-1].end)
    assert entry_ids(reader.read(10)) == ["e2", "e3", "e4"]
    reader.close()
    reopened = LegacySpoolReader(path)  # the cursor survives the reader
    rest = reopened.read(10)
    assert entry_ids(rest) == ["e2", "e3", "e4"]
    reopened.advance(rest[-1].end)
    reopened.close()
    emptied = LegacySpoolReader(path)
    assert emptied.read(10) == []
    emptied.close()


def test_a_torn_last_record_is_never_read(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    write_legacy_spool(path, [rec(1), spool_line(rec(2))[:-7]])  # a crash mid-append
    reader = LegacySpoolReader(path)
    entries = reader.read(10)
    assert entry_ids(entries) == ["e1"]
    reader.advance(entries[-1].end)
    assert reader.read(10) == []
    reader.close()


def test_unreadable_record_is_reported_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    write_legacy_spool(path, [rec(1), b"{not json}\n", rec(2)])
    reader = LegacySpoolReader(path)
    assert entry_ids(reader.read(10)) == ["e1", None, "e2"]
    reader.close()


@pytest.mark.parametrize("cursor", ["garbage", "999999", "3"])
def test_a_bad_cursor_reads_from_the_start(tmp_path: Path, cursor: str) -> None:
    path = tmp_path / "s.spool"
    write_legacy_spool(path, [rec(1), rec(2)])
    (tmp_path / "s.spool.cursor").write_text(cursor)
    reader = LegacySpoolReader(path)
    assert entry_ids(reader.read(10)) == ["e1", "e2"]
    reader.close()


def test_advance_beyond_the_end_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    write_legacy_spool(path, [rec(1)])
    reader = LegacySpoolReader(path)
    with pytest.raises(ValueError):
        reader.advance(path.stat().st_size + 1)
    reader.close()


def test_a_spool_an_older_publisher_holds_is_not_opened(tmp_path: Path) -> None:
    path = tmp_path / "s.spool"
    write_legacy_spool(path, [rec(1)])
    with open(path, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(BlockingIOError):
            LegacySpoolReader(path)
    LegacySpoolReader(path).close()  # released: it opens


def test_path_component_is_one_safe_component() -> None:
    for name in ["..", ".", "a/b", "", "é", "x\x00y"]:
        safe = path_component(name)
        assert safe not in ("", ".", "..")
        assert "/" not in safe and "\x00" not in safe
    assert path_component("acme-1_x") == "acme-1_x"


# --- against a real broker that goes away and comes back -------------------------------------
def read_all(bootstrap: str, topic: str, expect: int, timeout: float = 60.0) -> list[Any]:
    """Everything on ``topic`` from the beginning (waits for ``expect``, then a little more)."""
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
            out += [m for m in consumer.consume(500, 0.5) if m.error() is None]
        out += [m for m in consumer.consume(500, 2.0) if m.error() is None]  # any duplicates
    finally:
        consumer.close()
    return out


def check_topic(bootstrap: str, topic: str, published: dict[str, str], runs: int) -> None:
    """Every published event exactly once; each run's sequences 1..n in partition order."""
    messages = read_all(bootstrap, topic, len(published))
    events = [CODEC.decode(m.value()).event for m in messages]
    counts: dict[str, int] = defaultdict(int)
    for event in events:
        counts[event.event_id] += 1
    assert set(counts) == set(published)
    assert all(n == 1 for n in counts.values()), {k: n for k, n in counts.items() if n > 1}
    per_run: dict[str, list[int]] = defaultdict(list)
    for message, event in sorted(
        zip(messages, events, strict=True), key=lambda me: (me[0].partition(), me[0].offset())
    ):
        assert message.key() == event.run_id.encode()
        assert published[event.event_id] == event.run_id
        per_run[event.run_id].append(event.sequence)
    assert len(per_run) == runs
    for run, seqs in per_run.items():
        assert seqs == list(range(1, len(seqs) + 1)), (run, seqs)


def broker_settings(tmp_path: Path, bootstrap: str, topic: str) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        spool_dir=tmp_path / "spool",
        tenant="t1",
        events_topic=topic,
        delivery_timeout_ms=3000,
    )


def publish_round(pub: Publisher, runs: list[str], per_run: int, into: dict[str, str]) -> None:
    for i in range(per_run * len(runs)):
        run = runs[i % len(runs)]
        event_id = pub.publish("MODEL_REASONING", run, {"text": f"thought {i}"})
        assert event_id is not None  # never None, never raised, broker up or down
        into[event_id] = run


@pytest.mark.kafka
def test_events_spool_while_the_broker_is_down_and_drain_when_it_returns(
    tmp_path: Path, restartable_broker: LocalBroker
) -> None:
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("spool"), partitions=3)
    runs = [f"run-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    published: dict[str, str] = {}
    pub = Publisher(
        broker_settings(tmp_path, bootstrap, topic), retry_backoff_s=0.2, retry_backoff_max_s=1.0
    )
    try:
        publish_round(pub, runs, 3, published)
        assert pub.flush(30) == 0
        assert pub.stats().sent == 9

        restartable_broker.stop()
        publish_round(pub, runs, 3, published)
        wait_until(
            lambda: pub.stats().spooled == 9 and pub.stats().delivery_errors >= 9,
            30,
            "the undeliverable events to be taken back into the spool",
        )
        publish_round(pub, runs, 1, published)  # straight to the spool, behind the others
        stats = pub.stats()
        assert (stats.spooled, stats.spool_depth, stats.rejected) == (12, 12, 0)
        assert stats.spooling and stats.delivery_errors >= 9

        restartable_broker.start()
        assert pub.drain(90), f"spool not drained: {pub.stats()}"
        assert not pub.stats().spooling
        publish_round(pub, runs, 1, published)  # direct again
        assert pub.flush(30) == 0
        stats = pub.stats()
        assert (stats.sent, stats.spool_depth) == (24, 0)
    finally:
        pub.close(timeout=10)
    check_topic(bootstrap, topic, published, len(runs))


@pytest.mark.kafka
def test_a_spool_left_at_close_is_drained_by_the_next_publisher(
    tmp_path: Path, restartable_broker: LocalBroker
) -> None:
    bootstrap = restartable_broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("spool"), partitions=2)
    runs = [f"run-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
    published: dict[str, str] = {}
    settings_ = broker_settings(tmp_path, bootstrap, topic)

    first = Publisher(settings_)
    publish_round(first, runs, 2, published)
    assert first.flush(30) == 0
    restartable_broker.stop()
    publish_round(first, runs, 2, published)
    first.close(timeout=1)  # broker down: what is queued is purged into the spool
    assert first.stats().spool_depth == 4
    spool_dir = Path(first.spool_path)
    assert any(p.stat().st_size > 0 for p in spool_dir.glob("*.seg"))

    restartable_broker.start()
    with Publisher(settings_) as second:
        assert second.spool_path == str(spool_dir)
        assert second.stats().spooling  # drains before anything new
        for run in runs:
            second.set_next_sequence(run, 5)
        publish_round(second, runs, 1, published)
        assert second.drain(90), f"spool not drained: {second.stats()}"
        assert second.stats().sent == 6
    assert second.stats().spool_depth == 0
    check_topic(bootstrap, topic, published, len(runs))
