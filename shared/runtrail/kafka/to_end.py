"""Read partitions of a topic to the end they had when reading began: the one reader of
"everything up to now" (the sessions restore, the publisher's recovery scan, a compacted
topic read whole).

A partition's end (its high watermark, or for a read-committed consumer its last stable
offset) is not the offset after its last message a consumer receives: a transaction's commit
or abort marker takes an offset no consumer is ever handed, an aborted transaction's records
are skipped by a read-committed consumer, and compaction or retention removes records. Waiting
for a message at ``end - 1`` then never ends. A partition is done here once the consumer's
position (which librdkafka moves past markers, aborted records and gaps) reaches its end, a
partition EOF at or past it arrives, or a message at or past ``end - 1`` is received.
A range that is empty (``start >= end``, e.g. every record deleted) is never assigned: the
consumer's position stays unknown until it receives something.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition


@dataclass(frozen=True, slots=True)
class Span:
    """Offsets ``[start, end)`` of one partition to read."""

    partition: int
    start: int
    end: int


class ReadTimeout(TimeoutError):
    """Some partitions did not reach their end in time; ``left`` maps each to (position, end)."""

    def __init__(self, topic: str, left: Mapping[int, tuple[int, int]]) -> None:
        self.topic = topic
        self.left = dict(left)
        where = ", ".join(f"{p}: at {pos} of {end}" for p, (pos, end) in sorted(left.items()))
        super().__init__(f"timed out reading {topic} to its end (left: {where})")


def spans(
    consumer: Consumer,
    topic: str,
    partitions: Iterable[int],
    starts: Mapping[int, int] | None = None,
    *,
    timeout: float = 30.0,
) -> list[Span]:
    """Per partition, ``[max(low watermark, start), end now)``; a partition absent from
    ``starts`` starts at its low watermark. The end is what ``consumer`` is told: a
    read-committed consumer (librdkafka's default) gets the last stable offset, so an open
    transaction's events are not waited for."""
    found = []
    for partition in partitions:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout
        )
        start = max(low, (starts or {}).get(partition, low))
        found.append(Span(partition, start, high))
    return found


def read_to_end(
    consumer: Consumer,
    topic: str,
    ranges: Iterable[Span],
    *,
    timeout: float | None,
    stall_timeout: float | None = None,
    poll_s: float = 0.2,
    max_batch: int = 1000,
) -> Iterator[list[Message]]:
    """Assign ``consumer`` to ``ranges`` and yield batches of their messages, in offset order
    per partition, until every partition's position reaches its end; :class:`ReadTimeout`
    past ``timeout`` seconds in all, or ``stall_timeout`` seconds without progress (a long
    rebuild has no overall bound). Messages at or past a partition's end (written after reading
    began) are left out; error messages other than partition EOF are yielded for the caller
    to judge. The consumer stays assigned: the caller closes it."""
    todo = {r.partition: r.end for r in ranges if r.start < r.end}
    if not todo:
        return
    starts = {r.partition: r.start for r in ranges if r.partition in todo}
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in todo])
    position = dict(starts)
    deadline = None if timeout is None else time.monotonic() + timeout
    progress = time.monotonic()
    while todo:
        now = time.monotonic()
        if (deadline is not None and now > deadline) or (
            stall_timeout is not None and now - progress > stall_timeout
        ):
            raise ReadTimeout(topic, {p: (position[p], end) for p, end in todo.items()})
        before = (len(todo), sum(position.values()))
        # never ask for more than are left: consume waits its whole timeout for a batch it
        # cannot fill
        left = sum(end - position[p] for p, end in todo.items())
        batch: list[Message] = []
        for msg in consumer.consume(max(1, min(max_batch, left)), poll_s):
            partition, offset, error = msg.partition(), msg.offset(), msg.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                batch.append(msg)
                continue
            end = todo.get(partition) if partition is not None else None
            if end is None or partition is None or offset is None:
                continue  # a partition already read to its end
            if error is None and offset < end:
                batch.append(msg)
                position[partition] = offset + 1
            if offset + 1 >= end if error is None else offset >= end:
                del todo[partition]  # its last message, a later one, or its EOF past the end
        if todo:
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= 0:
                    position[tp.partition] = max(position[tp.partition], tp.offset)
                if tp.offset >= todo[tp.partition]:
                    del todo[tp.partition]  # markers, aborted records or a gap at the end
        if (len(todo), sum(position.values())) != before:
            progress = time.monotonic()
        if batch:
            yield batch
            progress = time.monotonic()  # the caller's time on a batch is not a stall
