"""The outbox relay: events appended by commands reach the events topic exactly once, each
run's in sequence order.

Why a Kafka transaction and not only an idempotent producer: idempotence dedupes retries of
one producer session, not a relay that died after publishing and before recording it. Here:

* the relay's producer has a fixed ``transactional.id``; ``init_transactions()`` at start fences
  any earlier instance (a SIGKILLed relay's in-flight batch can no longer land) and aborts its
  open transaction, which read-committed consumers — librdkafka's default, so every runtrail
  service — never see;
* a batch is published in one transaction (the idempotent producer inside it keeps per-run
  order), committed, then dropped from the outbox together with the relay's topic positions
  (the tracking table, one store transaction);
* at start, before publishing, the relay reads the topic (read-committed) from its recorded
  positions to the end: the outbox events it finds there (header ``rt.outbox``) were committed
  by an instance that died before recording them — they are dropped from the outbox instead of
  being sent again. On the very first start the positions are the topic's end.

So an event is either on the topic and out of the outbox, or in the outbox and not on the
topic, at every point a relay can be killed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from runtrail.commands.store import EventStore, JsonDict, OutboxKey
from runtrail.events import EventCodec
from runtrail.kafka.client_log import with_client_logger
from runtrail.publisher.headers import event_headers

log = logging.getLogger(__name__)

#: Header marking an event relayed from a command store's outbox; its value is the sequence.
OUTBOX_HEADER = "rt.outbox"


@dataclass
class RelayStats:
    published: int = 0
    recovered: int = 0
    batches: int = 0
    aborted: int = 0


@dataclass
class _Batch:
    keys: list[OutboxKey] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class OutboxRelay:
    """Publishes one store's outbox to ``topic``; one active instance per ``transactional_id``."""

    def __init__(
        self,
        store: EventStore,
        topic: str,
        producer_config: Mapping[str, Any],
        consumer_config: Mapping[str, Any],
        *,
        transactional_id: str,
        batch_size: int = 500,
        timeout_s: float = 30.0,
    ) -> None:
        self.store = store
        self.topic = topic
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.codec = EventCodec()
        self.stats = RelayStats()
        self._consumer_config = with_client_logger(consumer_config)
        config = {
            **with_client_logger(producer_config),
            "transactional.id": transactional_id,
            "enable.idempotence": True,
        }
        # librdkafka refuses a transactional producer whose messages outlive the transaction
        tx_timeout = int(config.setdefault("transaction.timeout.ms", 60_000))
        config["message.timeout.ms"] = min(
            int(config.get("message.timeout.ms", 300_000)), tx_timeout
        )
        self._producer = Producer(config)
        self._started = False

    # --- start: fence, then recover ------------------------------------------------------------
    def start(self) -> None:
        """Fence earlier instances and reconcile the outbox with the topic (see the module)."""
        self._producer.init_transactions(self.timeout_s)
        self.recover()
        self._started = True

    def _partitions(self) -> list[int]:
        meta = self._producer.list_topics(self.topic, timeout=self.timeout_s)
        found = meta.topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            raise KafkaException(f"topic {self.topic} is not available: {found and found.error}")
        return sorted(found.partitions)

    def recover(self) -> int:
        """Drop from the outbox what committed relay transactions already put on the topic."""
        partitions = self._partitions()
        stored = self.store.relay_offsets(self.topic)
        consumer = Consumer(
            {
                **self._consumer_config,
                "group.id": "runtrail-outbox-relay-recovery",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        found: list[OutboxKey] = []
        ends: dict[tuple[str, int], int] = {}
        try:
            assign = []
            for p in partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=self.timeout_s
                )
                if p not in stored:  # first start: nothing of ours can be before the end
                    ends[(self.topic, p)] = high
                    continue
                if stored[p] >= high:
                    continue
                assign.append(TopicPartition(self.topic, p, max(stored[p], low)))
            open_parts = {tp.partition for tp in assign}
            if assign:
                consumer.assign(assign)
            while open_parts:
                msg = consumer.poll(self.timeout_s)
                if msg is None:
                    raise KafkaException(f"recovery read of {self.topic} timed out")
                err = msg.error()
                part, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        ends[(self.topic, part)] = offset
                        open_parts.discard(part)
                        continue
                    raise KafkaException(err)
                ends[(self.topic, part)] = offset + 1
                key = _outbox_key(msg)
                if key is not None:
                    found.append(key)
        finally:
            consumer.close()
        self.store.mark_published(found, ends)
        self.stats.recovered += len(found)
        if found:
            log.info("outbox relay: %d event(s) found on %s already", len(found), self.topic)
        return len(found)

    # --- publishing ----------------------------------------------------------------------------
    def pump(self) -> int:
        """Publish one batch of the outbox; the number of events published (0: it is empty)."""
        if not self._started:
            self.start()
        forms = self.store.outbox_batch(self.batch_size)
        if not forms:
            return 0
        batch = _Batch()
        self._producer.begin_transaction()
        try:
            for form in forms:
                self._produce(form, batch)
            self._producer.commit_transaction(self.timeout_s)
        except KafkaException as exc:
            self._abort(exc)
            raise
        if batch.errors:  # cannot happen after a successful commit; refuse to record it
            raise KafkaException(f"deliveries failed in a committed transaction: {batch.errors}")
        self.store.mark_published(batch.keys, batch.offsets)
        self.stats.published += len(batch.keys)
        self.stats.batches += 1
        return len(batch.keys)

    def _produce(self, form: JsonDict, batch: _Batch) -> None:
        key = (
            str(form["tenantId"]),
            str(form["runId"]),
            int(form["sequence"]),
            str(form["eventId"]),
        )

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                batch.errors.append(str(err))
                return
            where = (msg.topic(), msg.partition())
            batch.offsets[where] = max(batch.offsets.get(where, 0), msg.offset() + 1)
            batch.keys.append(key)

        headers = (*event_headers(form), (OUTBOX_HEADER, str(key[2]).encode()))
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    key=key[1].encode(),
                    value=self.codec.encode_json_form(form),
                    headers=list(headers),
                    on_delivery=delivered,
                )
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)

    def _abort(self, exc: KafkaException) -> None:
        """Abort the open transaction; the caller rebuilds the relay (fence and recover)."""
        error = exc.args[0] if exc.args else None
        self.stats.aborted += 1
        if isinstance(error, KafkaError) and error.fatal():
            log.error("outbox relay: fatal producer error (fenced by another relay?): %s", error)
            return
        try:
            self._producer.abort_transaction(self.timeout_s)
        except KafkaException as again:
            log.warning("outbox relay: abort failed: %s", again)

    def drain(self) -> int:
        """Publish until the outbox is empty; the number of events published."""
        total = 0
        while True:
            sent = self.pump()
            if not sent:
                return total
            total += sent

    def close(self) -> None:
        self._producer.flush(self.timeout_s)


def _outbox_key(msg: Any) -> OutboxKey | None:
    headers = dict(msg.headers() or [])
    sequence = headers.get(OUTBOX_HEADER)
    tenant = headers.get("rt.tenant")
    event_id = headers.get("rt.event_id")
    key = msg.key()
    if sequence is None or tenant is None or event_id is None or key is None:
        return None
    return tenant.decode(), key.decode(), int(sequence.decode()), event_id.decode()
