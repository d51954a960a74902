"""Reading partitions to their end over the real broker when a transactional producer (the
outbox relay's kind) wrote to them: a commit marker takes the offset after a transaction's last
event and is never delivered, an aborted transaction's records are skipped by a read-committed
consumer, and deleted records leave a partition whose end no message reaches. Every "read to
the end" reader (``runtrail sessions rebuild`` / ``show --restore``, a compacted topic read
whole, the publisher's recovery scan, the projector's bounded topic reader) finishes, with
what was committed and nothing aborted. Timeouts are short: a reader that waits for a message
at ``end - 1`` fails in seconds, not after two minutes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from runtrail.config import Settings
from runtrail.events import validate_json_form
from runtrail.kafka.compacted import latest_records
from runtrail.kafka.to_end import read_to_end, spans
from runtrail.publisher.headers import event_headers
from runtrail.publisher.recovery import already_on_topic
from runtrail.sessions import AgentSession, parse_snapshot
from runtrail.sessions import restore as restore_module
from runtrail.sessions.store_file import FileSessionStore
from runtrail_services.projector.topic_reader import BoundedTopicReader
from runtrail_tools.cli.main import main
from tests.sessions_support import session_forms
from tests.support import create_topic, encode, unique_topic

pytestmark = pytest.mark.kafka

#: the partition the session's events are on (partition 0 stays empty)
PART = 1
#: seconds any read may take here: a reader stuck at a marker fails fast
READ_S = 10.0
#: plain events, then a committed transaction's, then an aborted transaction's
PLAIN, COMMITTED, ABORTED = 12, 8, 5


def _produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes, bytes, list[Any]]],
    *,
    partition: int = PART,
    transaction: bool | None = None,
) -> None:
    """Produce (key, value, headers) to ``partition``: plainly (``transaction`` None), or in a
    transaction then committed (True) or aborted (False)."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True}
    if transaction is not None:
        config["transactional.id"] = f"test-read-to-end-{uuid.uuid4().hex[:10]}"
    producer = Producer(config)
    if transaction is not None:
        producer.init_transactions(30)
        producer.begin_transaction()
    for key, value, headers in records:
        producer.produce(topic, value=value, key=key, headers=headers, partition=partition)
    if transaction is None:
        assert producer.flush(30) == 0
    elif transaction:
        producer.commit_transaction(30)
    else:
        assert producer.flush(30) == 0  # the records are in the log, then aborted
        producer.abort_transaction(30)


def _event_records(forms: list[dict[str, Any]]) -> list[tuple[bytes, bytes, list[Any]]]:
    return [(f["runId"].encode(), encode(f), list(event_headers(f))) for f in forms]


def _high(bootstrap: str, topic: str, partition: int = PART) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}"})
    try:
        tp = TopicPartition(topic, partition)
        return int(consumer.get_watermark_offsets(tp, timeout=10)[1])
    finally:
        consumer.close()


@pytest.fixture
def session_topic(kafka_bootstrap: str) -> tuple[str, list[dict[str, Any]]]:
    """A 2-partition events topic; on partition 1, session t1/s1's events: 12 plain, 8 in a
    committed transaction (then its marker), 5 in an aborted one (then its marker). Returns
    the topic and the committed forms, in offset order (offsets 0 to 19)."""
    topic = create_topic(kafka_bootstrap, unique_topic("rte"), partitions=2)
    forms = session_forms(PLAIN + COMMITTED + ABORTED)
    committed = forms[: PLAIN + COMMITTED]
    _produce(kafka_bootstrap, topic, _event_records(forms[:PLAIN]))
    _produce(kafka_bootstrap, topic, _event_records(forms[PLAIN:][:COMMITTED]), transaction=True)
    _produce(kafka_bootstrap, topic, _event_records(forms[len(committed) :]), transaction=False)
    # 20 events, the commit marker (20), 5 aborted records (21-25), the abort marker (26)
    assert _high(kafka_bootstrap, topic) == len(forms) + 2
    return topic, committed


def _session(topic: str, forms: list[dict[str, Any]]) -> AgentSession:
    """The session the topic's committed events build, with their real sources."""
    session = AgentSession("t1", "s1")
    for offset, form in enumerate(forms):
        session.apply(validate_json_form(form), source=(topic, PART, offset))
    return session


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    started = time.monotonic()
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert time.monotonic() - started < READ_S + 5, err
    return status, out, err


@pytest.fixture
def short_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restore_module, "READ_TIMEOUT_S", READ_S)


@pytest.mark.usefixtures("short_restore")
def test_sessions_rebuild_finishes_past_commit_and_abort_markers(
    kafka_bootstrap: str,
    session_topic: tuple[str, list[dict[str, Any]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, committed = session_topic
    store = FileSessionStore(tmp_path / "sessions")
    common = ["--store", store.describe(), "--tenant", "t1"]
    common += ["--bootstrap-servers", kafka_bootstrap, "--events-topic", topic]

    status, _, err = _cli(capsys, "sessions", "rebuild", "s1", *common)

    assert status == 0, err
    expected = _session(topic, committed).snapshot()
    stored = store.load("t1", "s1")
    assert stored is not None and stored.revision == len(committed)  # nothing aborted
    assert stored.digest == expected.digest
    assert f"rebuilt t1/s1: {len(committed)} event(s)" in err


@pytest.mark.usefixtures("short_restore")
@pytest.mark.parametrize("saved", [PLAIN, PLAIN + COMMITTED], ids=["tail", "only-markers-left"])
def test_sessions_show_restore_finishes_past_markers(
    kafka_bootstrap: str,
    session_topic: tuple[str, list[dict[str, Any]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    saved: int,
) -> None:
    """From a snapshot before the committed transaction, and from one after the last event
    (what is left to read is only the markers and the aborted records)."""
    topic, committed = session_topic
    store = FileSessionStore(tmp_path / "sessions")
    store.save(_session(topic, committed[:saved]).snapshot())
    common = ["--store", store.describe(), "--tenant", "t1"]
    common += ["--bootstrap-servers", kafka_bootstrap, "--events-topic", topic]

    status, out, err = _cli(capsys, "sessions", "show", "s1", "--restore", *common)

    assert status == 0, err
    replayed = len(committed) - saved
    assert f"{saved} event(s) from the snapshot, {replayed} replayed" in err
    restored = parse_snapshot(out.strip(), "stdout")
    assert restored.digest == _session(topic, committed).snapshot().digest


def test_read_to_end_skips_markers_aborted_and_deleted_records(
    kafka_bootstrap: str, session_topic: tuple[str, list[dict[str, Any]]]
) -> None:
    """The shared helper: from offset 20 (a commit marker) only markers and aborted records
    are left; a partition whose records were all deleted has nothing to wait for."""
    from confluent_kafka import Consumer

    topic, committed = session_topic
    _produce(kafka_bootstrap, topic, [(b"k", b"v", [])] * 3, partition=0)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    deleted = TopicPartition(topic, 0, 3)
    admin.delete_records([deleted])[deleted].result(30)

    def offsets(partitions: list[int], starts: dict[int, int]) -> list[tuple[int, int]]:
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"t-{uuid.uuid4()}"})
        try:
            ranges = spans(consumer, topic, partitions, starts)
            started = time.monotonic()
            found = [
                (int(m.partition() or 0), int(m.offset() or 0))
                for batch in read_to_end(consumer, topic, ranges, timeout=READ_S)
                for m in batch
            ]
            assert time.monotonic() - started < READ_S
            return found
        finally:
            consumer.close()

    events = [(PART, o) for o in range(len(committed))]
    assert offsets([PART], {PART: len(committed)}) == []  # from the commit marker
    assert offsets([PART], {}) == events
    assert offsets([0, PART], {PART: 15}) == events[15:]  # partition 0: all deleted
    assert offsets([0, PART], {0: 1}) == events


def test_compacted_topic_read_whole_past_markers_and_a_deleted_partition(
    kafka_bootstrap: str,
) -> None:
    """:func:`latest_records` (the erasure's and the OTLP ledger's reader): a committed and an
    aborted transaction on one partition, every record deleted on the other."""
    topic = create_topic(kafka_bootstrap, unique_topic("rte-compacted"), partitions=2)
    _produce(kafka_bootstrap, topic, [(b"gone", b"x", [])] * 4, partition=0)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    emptied = TopicPartition(topic, 0, 4)
    admin.delete_records([emptied])[emptied].result(30)
    _produce(kafka_bootstrap, topic, [(b"a", b"1", []), (b"b", b"1", [])], transaction=True)
    _produce(kafka_bootstrap, topic, [(b"a", b"2", []), (b"c", b"2", [])], transaction=False)
    settings = Settings(bootstrap_servers=kafka_bootstrap)

    started = time.monotonic()
    latest = latest_records(settings, topic, timeout=READ_S)

    assert time.monotonic() - started < READ_S
    assert {k: (v.partition, v.value) for k, v in latest.items()} == {
        b"a": (PART, b"1"),
        b"b": (PART, b"1"),
    }


def test_publisher_recovery_scan_past_markers(
    kafka_bootstrap: str, session_topic: tuple[str, list[dict[str, Any]]]
) -> None:
    """The publisher's recovery scan finds the committed events only, and finishes."""
    topic, committed = session_topic
    aborted = session_forms(PLAIN + COMMITTED + ABORTED)[len(committed) :]
    wanted = {str(f["eventId"]) for f in committed[-3:] + aborted}

    started = time.monotonic()
    found = already_on_topic(
        {"bootstrap.servers": kafka_bootstrap},
        topic,
        wanted,
        since_ms=int(time.time() * 1000) - 600_000,
        timeout=READ_S,
    )

    assert time.monotonic() - started < READ_S
    assert found == {str(f["eventId"]) for f in committed[-3:]}


def test_projector_bounded_reader_past_markers(
    kafka_bootstrap: str, session_topic: tuple[str, list[dict[str, Any]]]
) -> None:
    """The projector's rebuild reader yields the committed events and stops at the end, also
    with events appended after it started (the live service's, not the rebuild's)."""
    topic, committed = session_topic
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    reader = BoundedTopicReader(settings, topic, timeout_s=READ_S, stall_timeout_s=READ_S)
    try:
        _produce(kafka_bootstrap, topic, [(b"later", b"x", [])] * 3)
        started = time.monotonic()
        offsets = [int(m.offset() or 0) for batch in reader.batches(7) for m in batch]
        assert time.monotonic() - started < READ_S
    finally:
        reader.close()
    assert offsets == list(range(len(committed)))
