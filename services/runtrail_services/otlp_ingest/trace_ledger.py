"""The mapper's trace ledger: where a trace forgotten while open left its sequence numbers.

Why: the mapper forgets an open trace that stayed silent for ``trace_idle_ms`` (so the raw
partition's commit can move on), and nothing of that trace is read again after a restart. A
later span of it (an agent that paused for long) must continue the run's sequence, not start it
again at 1 (which every consumer would dead-letter as conflicts). So each forgetting is written
here: a compacted topic (:func:`~runtrail.kafka.topics.otlp_traces_topic`), one record per
trace keyed ``tenant/traceId``, in the partition of the same number as the raw one, which a
mapper reads whole when it takes a raw partition.

A record holds the trace's *epochs*: ``[offset, next sequence]``, one per forgetting, the
offset being the raw record at which it was forgotten. A trace seen again at raw offset ``O``
continues from the latest epoch at or before ``O``: what a first pass and any replay from an
earlier commit both know at that record (a replay restores epochs written later too, and
ignores them until it reaches them), so the numbering stays the same, whoever maps.
"""

from __future__ import annotations

import time
import uuid
from typing import cast

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from runtrail.config import Settings
from runtrail.kafka.output_topic import OutputTopic
from runtrail.kafka.topics import otlp_traces_topic
from runtrail_services.otlp_ingest.raw_records import key_of

#: epochs kept per trace (each one a forgetting: a trace forgotten more often is an oddity)
MAX_EPOCHS = 16
#: how long reading a ledger partition at assignment may take
RESTORE_TIMEOUT_S = 60.0

TraceKey = tuple[str, str]
#: per trace: (raw offset, next sequence), oldest first
Epochs = list[tuple[int, int]]

#: the group of each ledger read (one of its own, never committed: the ledger is read whole)
LEDGER_GROUP_PREFIX = "runtrail-otlp-ledger-"


class TraceLedger:
    """The ledger of one mapper: epochs per raw partition, and the producer writing them."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.topic = otlp_traces_topic(settings)
        self._output = OutputTopic(settings, self.topic, client_id="runtrail-otlp-mapper-ledger")
        self._epochs: dict[int, dict[TraceKey, Epochs]] = {}

    def restore(self, partitions: list[int]) -> None:
        """Read the ledger's ``partitions`` whole (a mapper took the raw ones)."""
        for partition in partitions:
            self._epochs[partition] = {}
        if not partitions:
            return
        consumer = Consumer(
            self._settings.kafka_config(
                **{
                    "group.id": f"{LEDGER_GROUP_PREFIX}{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                }
            )
        )
        try:
            ends = {
                p: consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=RESTORE_TIMEOUT_S
                )[1]
                for p in partitions
            }
            todo = {p: end for p, end in ends.items() if end > 0}
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in todo])
            deadline = time.monotonic() + RESTORE_TIMEOUT_S
            while todo:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {self.topic} {sorted(todo)} took too long")
                for msg in consumer.consume(1000, 0.2):
                    if msg.error() is not None:
                        continue
                    partition, offset = cast(int, msg.partition()), cast(int, msg.offset())
                    self._apply(partition, msg.key(), msg.value())
                    if offset + 1 >= todo.get(partition, 0):
                        todo.pop(partition, None)
                for tp in consumer.position([TopicPartition(self.topic, p) for p in list(todo)]):
                    if tp.offset >= todo.get(tp.partition, 1 << 62):
                        todo.pop(tp.partition, None)  # the end is compaction's gap
        finally:
            consumer.close()

    def _apply(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        if not key or not value:
            return
        tenant, _, trace_id = key.decode().partition("/")
        epochs = [(int(o), int(n)) for o, n in orjson.loads(value)]
        self._epochs.setdefault(partition, {})[(tenant, trace_id)] = epochs

    def forget_partitions(self, partitions: list[int]) -> None:
        for partition in partitions:
            self._epochs.pop(partition, None)

    def next_sequence(self, partition: int, key: TraceKey, offset: int) -> int | None:
        """The sequence a trace seen at raw ``offset`` continues at, if it was forgotten
        before (at or before ``offset``)."""
        before = [n for o, n in self._epochs.get(partition, {}).get(key, ()) if o <= offset]
        return before[-1] if before else None

    def forgotten(self, partition: int, key: TraceKey, offset: int, next_sequence: int) -> None:
        """A trace forgotten while open at raw ``offset``, its next sequence unused."""
        if self.next_sequence(partition, key, offset) == next_sequence:
            return  # known already (a replay forgetting it again, a span that added nothing)
        epochs = self._epochs.setdefault(partition, {}).setdefault(key, [])
        epochs.append((offset, next_sequence))
        epochs.sort()
        del epochs[:-MAX_EPOCHS]
        self._output.send(key_of(*key), orjson.dumps(epochs), partition=partition)

    def flush(self, timeout_s: float) -> None:
        """Every epoch written is acknowledged, or :class:`StoreUnavailable`."""
        self._output.confirm(timeout_s)

    def close(self) -> None:
        self._output.close()
