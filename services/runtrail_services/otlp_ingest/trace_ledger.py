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

import orjson

from runtrail.config import Settings
from runtrail.kafka.compacted import read_to_end, whole_topic_reader
from runtrail.kafka.output_topic import OutputTopic
from runtrail.kafka.topics import LEDGER_GROUP_PREFIX, otlp_traces_topic
from runtrail_services.otlp_ingest.raw_records import key_of

#: epochs kept per trace (each one a forgetting: a trace forgotten more often is an oddity)
MAX_EPOCHS = 16
#: how long reading a ledger partition at assignment may take
RESTORE_TIMEOUT_S = 60.0

TraceKey = tuple[str, str]
#: per trace: (raw offset, next sequence), oldest first
Epochs = list[tuple[int, int]]


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
        consumer = whole_topic_reader(self._settings, LEDGER_GROUP_PREFIX)
        try:
            read_to_end(consumer, self.topic, partitions, self._apply, RESTORE_TIMEOUT_S)
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
