"""``TopicCacheClient``: a remote cache bootstrapped from the compacted cache topic, no service.

At start it reads the cache topic from the beginning to its current end, keeping the records of
one tenant (other tenants' records are skipped: a process reading the topic is trusted with it
by the topic's ACLs, so scope read access to the topic accordingly). Lookups are then answered
from memory. A miss that must be read-your-writes consistent tails the topic until the service's
*position* records show the events topic consumed (and made durable) that far — then reads on
to the end of every partition, since positions are written after the data they cover — or the
timeout passes (:class:`NotCaughtUp`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Unpack, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from runtrail.config import Settings
from runtrail.kafka.consumer_config import consumer_config
from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.errors import CacheUnavailable, NotCaughtUp
from runtrail.resume.keys import Kind, Scope
from runtrail.resume.records import parse_record
from runtrail.resume.remote import Ask, Lookup


class TopicCacheClient:
    """A :class:`~runtrail.resume.remote.CacheSource` over the compacted cache topic."""

    def __init__(
        self,
        settings: Settings,
        tenant: str,
        *,
        wait_ms: int = 10_000,
        timeout_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self.tenant = tenant
        self.topic = settings.resume_cache_topic
        self.events_topic = settings.events_topic
        self.wait_ms = wait_ms
        self._lock = threading.Lock()
        self._consumer_lock = threading.Lock()  # the consumer is used by one thread at a time
        self._runs: dict[str, int] = {}
        self._entries: dict[tuple[str, Kind, str], CacheEntry] = {}
        self._latest: dict[tuple[Kind, str], CacheEntry] = {}
        self._intents: dict[tuple[str, str], Intent] = {}
        self._positions: dict[int, int] = {}
        self._consumer = Consumer(
            consumer_config(
                settings,
                **{
                    "group.id": f"runtrail-cache-reader-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                },
            )
        )
        self.records = 0
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=timeout_s)
            described = metadata.topics.get(self.topic)
            if described is None or described.error is not None:
                raise CacheUnavailable(f"cache topic {self.topic!r} is not available")
            self._partitions = sorted(described.partitions)
            self._consumer.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self._partitions]
            )
            self._read_to_end(timeout_s)
        except KafkaException as exc:
            self._consumer.close()
            raise CacheUnavailable(f"cannot read the cache topic: {exc}") from exc
        except CacheUnavailable:
            self._consumer.close()
            raise

    # --- reading the topic ----------------------------------------------------------------
    def _ends(self, timeout_s: float) -> dict[int, int]:
        return {
            p: self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=timeout_s
            )[1]
            for p in self._partitions
        }

    def _read_to_end(self, timeout_s: float) -> None:
        """Consume until every partition's position reaches the end it had when we started."""
        ends = self._ends(timeout_s)
        deadline = time.monotonic() + timeout_s
        positions = {p: 0 for p in self._partitions}
        while any(positions[p] < end for p, end in ends.items() if end > 0):
            if time.monotonic() > deadline:
                raise CacheUnavailable("timed out reading the cache topic to its end")
            for msg in self._consumer.consume(1000, 0.2):
                if msg.error() is not None:
                    continue
                positions[cast(int, msg.partition())] = cast(int, msg.offset()) + 1
                self._apply(msg.key(), msg.value())
            for tp in self._consumer.position(
                [TopicPartition(self.topic, p) for p in self._partitions]
            ):
                if tp.offset >= 0:
                    positions[tp.partition] = max(positions[tp.partition], tp.offset)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        record = parse_record(key, value)
        if record is None:
            return
        self.records += 1
        with self._lock:
            if record.type == "position":
                _, topic, partition = record.key
                if topic == self.events_topic and record.next_offset is not None:
                    self._positions[int(partition)] = max(
                        record.next_offset, self._positions.get(int(partition), 0)
                    )
            elif record.key[1] != self.tenant:
                return
            elif record.type == "entry" and record.entry is not None:
                entry = record.entry
                self._entries.setdefault((entry.run_id, entry.kind, entry.key), entry)
                self._latest[(entry.kind, entry.key)] = entry
            elif record.type == "run" and record.next_offset is not None:
                run = str(record.key[2])
                self._runs[run] = max(record.next_offset, self._runs.get(run, 0))
            elif record.type == "intent":
                _, _, run, iid = record.key
                if record.intent is None:
                    self._intents.pop((run, iid), None)
                else:
                    self._intents[(run, iid)] = record.intent

    def _caught_up(self, min_offsets: Mapping[int, int]) -> bool:
        with self._lock:
            return all(self._positions.get(p, 0) > o for p, o in min_offsets.items())

    def _wait(self, min_offsets: Mapping[int, int]) -> None:
        deadline = time.monotonic() + self.wait_ms / 1000
        while not self._caught_up(min_offsets):
            if time.monotonic() >= deadline:
                raise NotCaughtUp(f"cache topic not caught up to {dict(min_offsets)}")
            try:
                for msg in self._consumer.consume(1000, 0.1):
                    if msg.error() is None:
                        self._apply(msg.key(), msg.value())
            except KafkaException as exc:
                raise CacheUnavailable(f"cannot read the cache topic: {exc}") from exc
        if min_offsets:
            # the positions were written after the data they cover: read every partition on
            # to its end now, and that data is in
            try:
                self._read_to_end(self.wait_ms / 1000 + 5)
            except KafkaException as exc:
                raise CacheUnavailable(f"cannot read the cache topic: {exc}") from exc

    def _find(self, run_id: str, kind: Kind, key: str, scope: Scope) -> CacheEntry | None:
        with self._lock:
            if scope is Scope.RUN:
                return self._entries.get((run_id, kind, key))
            return self._latest.get((kind, key))

    # --- CacheSource ----------------------------------------------------------------------
    def lookup(self, **ask: Unpack[Ask]) -> Lookup:
        if ask["tenant"] != self.tenant:
            return Lookup(None)
        run_id, kind, key, scope = ask["run_id"], ask["kind"], ask["key"], ask["scope"]
        with self._consumer_lock:
            entry = self._find(run_id, kind, key, scope)
            if entry is not None:
                return Lookup(entry)
            self._wait(ask["min_offsets"])
            entry = self._find(run_id, kind, key, scope)
            if entry is not None:
                return Lookup(entry)
            with self._lock:
                intent = next(
                    (i for (r, _), i in self._intents.items() if r == run_id and i.key == key),
                    None,
                )
            return Lookup(None, intent if kind is Kind.TOOL else None)

    def run_state(self, *, tenant: str, run_id: str, min_offsets: Mapping[int, int]) -> RunState:
        if tenant != self.tenant:
            return RunState(tenant, run_id)
        with self._consumer_lock:
            self._wait(min_offsets)
            with self._lock:
                intents = tuple(i for (r, iid), i in sorted(self._intents.items()) if r == run_id)
                last = self._runs.get(run_id, 0)
            return RunState(tenant, run_id, last, intents)

    def entry_count(self) -> int:
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        self._consumer.close()
