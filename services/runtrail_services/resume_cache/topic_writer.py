"""Writes the cache to the compacted cache topic, before the store commits.

While the broker is away, :meth:`CacheTopicWriter.write` raises ``StoreUnavailable``: the
runtime reports not ready and retries the whole flush later, and the store commits nothing
meanwhile. Order matters for a crash: records are produced and *acknowledged* first, then the store commits
the batch with its offsets. A crash in between makes the restarted service write the same
records again — harmless, compaction keeps one per key — whereas the other order could commit
offsets past entries the topic never got.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from runtrail.config import Settings
from runtrail.kafka.admin import admin_client
from runtrail.kafka.durability import cluster_replication, durability_configs
from runtrail.kafka.output_topic import CONFIRM_TIMEOUT_S, OutputTopic, output_message_max_bytes
from runtrail.kafka.topics import design_topic_names, list_topics_including
from runtrail.resume.builder import WriteBatch
from runtrail.resume.records import (
    Record,
    entry_record,
    intent_record,
    intent_tombstone,
    position_record,
    run_record,
)

log = logging.getLogger(__name__)


def ensure_cache_topic(settings: Settings, timeout: float = 30.0) -> None:
    """Create the compacted cache topic if it is missing (``runtrail topics ensure`` would too)."""
    admin = admin_client(settings.kafka_config())
    topic = settings.resume_cache_topic
    names = design_topic_names(settings)
    topics = list_topics_including(admin, names, timeout)
    if topic in topics:
        return
    replication = cluster_replication(admin, settings.replication_factor, names, topics, timeout)
    spec = NewTopic(
        topic,
        settings.partitions,
        replication.factor,
        config={
            "cleanup.policy": "compact",
            "max.message.bytes": str(output_message_max_bytes(settings)),
            **durability_configs(replication.factor),
        },
    )
    future = admin.create_topics([spec], operation_timeout=timeout)[topic]
    try:
        future.result(timeout)
        log.info("created the compacted cache topic %s", topic)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def batch_records(batch: WriteBatch, events_topic: str) -> tuple[list[Record], list[Record]]:
    """The topic records of one flush: data (entries, intents — tombstones once closed — and
    run sequences), then positions. Positions are written only after every data record is
    acknowledged, so a reader that sees a position and then reads every partition to its end
    has seen everything that position covers."""
    data = [entry_record(e) for e in batch.entries.values()]
    for (tenant, run, iid), held in batch.intents.items():
        data.append(
            intent_record(held[0]) if held is not None else intent_tombstone(tenant, run, iid)
        )
    for (tenant, run), (sequence, _) in batch.runs.items():
        data.append(run_record(tenant, run, sequence))
    positions = [
        position_record(events_topic, partition, offset)
        for (topic, partition), offset in batch.offsets.items()
        if topic == events_topic
    ]
    return data, positions


class CacheTopicWriter:
    """An idempotent, acks=all producer to the cache topic that rides out broker outages.

    :meth:`write` raises :class:`~runtrail.runtime.unavailable.StoreUnavailable` when the
    records are not all acknowledged in time; the caller keeps its batch and calls ``write``
    again later. Records already sent and still unacknowledged are not sent twice (the
    producer delivers them when the broker returns, in order); a record too large for the
    topic goes to ``on_too_large`` with its key and is dropped.
    """

    def __init__(
        self,
        settings: Settings,
        flush_timeout_s: float = CONFIRM_TIMEOUT_S,
        *,
        on_too_large: Callable[[bytes, str], None] | None = None,
    ) -> None:
        self.topic = settings.resume_cache_topic
        self.flush_timeout_s = flush_timeout_s
        self._out = OutputTopic(
            settings,
            self.topic,
            client_id=f"runtrail-resume-cache-{os.getpid()}",
            on_too_large=on_too_large,
            overrides={"linger.ms": 5},
        )
        #: what was sent for the batch in progress, per key: not sent again when the flush is
        #: retried (after the topic or the store was unavailable)
        self._sent: dict[bytes, bytes | None] = {}

    def write(self, records: list[Record]) -> None:
        """Produce and wait for every acknowledgement; ``StoreUnavailable`` otherwise."""
        if not records:
            return
        sent = self._sent
        for key, value in records:
            if key in sent and sent[key] == value:
                continue
            sent[key] = value
            self._out.send(key, value, tag=key)
        self._out.confirm(self.flush_timeout_s)

    def batch_done(self) -> None:
        """The store has the batch too: records sent from now on are a new batch's."""
        self._sent.clear()

    def close(self) -> None:
        self._out.close()
