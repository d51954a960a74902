"""The shared producer core (:mod:`runtrail.kafka.unacked`): a record is kept until the broker
acknowledges it, and one refused inside a batch is sent again alone before it is judged.

The fake broker below refuses a whole batch over its limit, every record in it with the size
error, as Kafka does for a topic's ``max.message.bytes``; the output topics and the dead
letters must deliver every record that fits exactly once, and judge only the ones that do not.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from confluent_kafka import KafkaError
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.config import Settings
from runtrail.kafka.output_topic import OutputTopic
from runtrail.kafka.unacked import SizeSuspects, Unacked, resend
from runtrail.runtime import deadletter
from runtrail.runtime.deadletter import H_VALUE_SIZE, DeadLetterProducer
from runtrail.runtime.unavailable import StoreUnavailable

LIMIT = 100


class BatchBroker:
    """A producer whose every flush sends what is queued as one batch; a batch over ``LIMIT``
    bytes is refused whole. Success reports only without ``delivery.report.only.error``."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.errors_only = bool((config or {}).get("delivery.report.only.error"))
        self.queue: list[tuple[bytes | None, bytes | None, list[Any], Any]] = []
        self.log: list[tuple[bytes | None, bytes | None, list[Any]]] = []
        self.down = False

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[Any] | None = None,
        on_delivery: Any = None,
        **_: Any,
    ) -> None:
        self.queue.append((key, value, list(headers or []), on_delivery))

    def poll(self, timeout: float = 0) -> int:
        batch, self.queue = self.queue, []
        size = sum(len(value or b"") for _, value, _, _ in batch)
        code = (
            KafkaError._TRANSPORT
            if self.down
            else KafkaError.MSG_SIZE_TOO_LARGE
            if size > LIMIT
            else None
        )
        for key, value, headers, report in batch:
            if code is None:
                self.log.append((key, value, headers))
                if not self.errors_only:
                    report(None, None)
            else:
                report(KafkaError(code), None)
        return len(batch)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0


def test_a_first_size_refusal_makes_a_suspect_and_a_second_is_the_verdict() -> None:
    suspects = SizeSuspects()
    assert not suspects.refused(7)
    assert 7 in suspects
    assert suspects.refused(7)
    assert 7 not in suspects


def test_a_record_sent_while_an_earlier_one_waits_waits_behind_it() -> None:
    unacked: Unacked[str] = Unacked()
    first, now = unacked.add("a")
    assert now
    unacked.fail(first)
    second, now = unacked.add("b")
    assert not now
    produced: list[int] = []
    resend(unacked, produced.append, lambda timeout: 0, 1.0)
    assert produced == [first, second]


def test_resend_stops_at_a_record_that_fails_again_and_keeps_the_rest_in_order() -> None:
    unacked: Unacked[str] = Unacked()
    ids = [unacked.add(value)[0] for value in "abc"]
    for rid in ids:
        unacked.fail(rid)
    resend(unacked, unacked.fail, lambda timeout: 0, 1.0)
    assert unacked.take_failed() == ids


def test_after_a_fatal_error_every_kept_record_is_sent_again_unless_its_report_came() -> None:
    """A client a fatal error ended may lose the report it was serving: every record kept is
    failed, in order; one whose acknowledgement still arrives is not sent again."""
    unacked: Unacked[str] = Unacked()
    ids = [unacked.add(value)[0] for value in "abcd"]
    unacked.acked(ids[0])
    unacked.fail_all()
    unacked.acked(ids[2])  # its report came after all
    assert unacked.failed == 2
    produced: list[int] = []
    resend(unacked, produced.append, lambda timeout: 0, 1.0)
    assert produced == [ids[1], ids[3]]


sizes = st.lists(st.integers(min_value=1, max_value=2 * LIMIT), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(sizes=sizes)
def test_output_topic_delivers_each_fitting_record_once_and_drops_only_the_too_large(
    sizes: list[int],
) -> None:
    brokers: list[BatchBroker] = []

    def factory(config: dict[str, Any]) -> BatchBroker:
        brokers.append(BatchBroker(config))
        return brokers[-1]

    dropped: list[Any] = []
    topic = OutputTopic(
        Settings(),
        "out",
        client_id="test",
        on_too_large=lambda tag, detail: dropped.append(tag),
        producer_factory=factory,
    )
    assert brokers[0].errors_only
    values = [bytes([n % 256]) * size for n, size in enumerate(sizes)]
    topic.send_many((b"k", value) for value in values[: len(values) // 2])
    for n, value in enumerate(values[len(values) // 2 :], start=len(values) // 2):
        topic.send(b"k", value, tag=n)
    for _ in range(len(values) + 2):
        try:
            topic.confirm(1.0)
            break
        except StoreUnavailable:
            continue
    else:
        pytest.fail("the output topic never confirmed")
    delivered = [value for _, value, _ in brokers[0].log]
    assert sorted(delivered) == sorted(v for v in values if len(v) <= LIMIT)
    assert topic.too_large == sum(1 for v in values if len(v) > LIMIT)
    assert topic.unacknowledged == 0
    assert all(len(values[tag]) > LIMIT for tag in dropped if tag is not None)


def test_output_topic_keeps_every_record_through_an_outage() -> None:
    broker = BatchBroker({"delivery.report.only.error": True})
    topic = OutputTopic(Settings(), "out", client_id="test", producer_factory=lambda c: broker)
    broker.down = True
    for n in range(3):
        topic.send(b"k", bytes([n]))
    with pytest.raises(StoreUnavailable):
        topic.confirm(1.0)
    assert topic.unacknowledged == 3
    topic.send(b"k", b"\x03")  # waits behind the three that failed
    broker.down = False
    topic.confirm(1.0)
    assert [value for _, value, _ in broker.log] == [bytes([n]) for n in range(4)]


@settings(max_examples=100, deadline=None)
@given(sizes=sizes)
def test_dead_letters_deliver_each_once_and_a_too_large_one_as_its_digest(
    sizes: list[int],
) -> None:
    brokers: list[BatchBroker] = []

    def factory(config: dict[str, Any]) -> BatchBroker:
        brokers.append(BatchBroker(config))
        return brokers[-1]

    original = deadletter.Producer
    deadletter.Producer = factory  # type: ignore[assignment,misc]
    try:
        producer = DeadLetterProducer({}, "dlq", "test")
    finally:
        deadletter.Producer = original  # type: ignore[misc]
    send = functools.partial(
        producer.send,
        headers=None,
        source_topic="events",
        partition=0,
        timestamp_ms=0,
        reason="handler-error",
        detail="boom",
    )
    values = [bytes([n % 256]) * size for n, size in enumerate(sizes)]
    for n, value in enumerate(values):
        send(key=str(n).encode(), value=value, offset=n)
    for _ in range(len(values) + 2):
        try:
            producer.flush(1.0)
            break
        except StoreUnavailable:
            continue
    else:
        pytest.fail("the dead letters never became durable")
    by_key = {key: (value, dict(headers)) for key, value, headers in brokers[0].log}
    assert len(brokers[0].log) == len(values)
    for n, value in enumerate(values):
        sent, headers = by_key[str(n).encode()]
        if len(value) <= LIMIT:
            assert sent == value
        else:
            assert sent is None
            assert headers[H_VALUE_SIZE] == str(len(value)).encode()
    assert producer.pending == 0
    assert producer.replaced == sum(1 for v in values if len(v) > LIMIT)
