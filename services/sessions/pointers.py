"""Publishing the latest snapshot of each session to the compacted sessions topic.

Sent only for snapshots already durable in the store, and flushed before the runtime commits
offsets (:meth:`PointerPublisher.flush` raises if any message failed, so nothing is committed
past a checkpoint whose pointer was lost). Large snapshots are uploaded first and the message
carries their reference and digest.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from runtrail.config import Settings
from runtrail.sessions import AgentSessionSnapshot, SessionStoreError
from runtrail.sessions.blobs import SnapshotBlobStore
from runtrail.sessions.pointer import SessionPointer, pointer_for

log = logging.getLogger(__name__)


class PointerPublisher:
    """An idempotent producer of :class:`SessionPointer` messages, keyed by tenant + session."""

    def __init__(
        self,
        settings: Settings,
        *,
        blobs: SnapshotBlobStore | None,
        inline_limit: int,
        topic: str | None = None,
    ) -> None:
        self.topic = topic or settings.sessions_topic
        self.blobs = blobs
        self.inline_limit = inline_limit
        self._errors: list[str] = []
        self._producer = Producer(
            settings.kafka_config(
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 20,
                    "compression.type": settings.compression,
                    "partitioner": "murmur2_random",
                }
            )
        )

    def send(self, snapshot: AgentSessionSnapshot) -> SessionPointer:
        """Queue the pointer to ``snapshot`` (uploading it first if it is large)."""
        pointer = pointer_for(
            snapshot, snapshot.to_bytes(), inline_limit=self.inline_limit, blobs=self.blobs
        )
        value = pointer.to_bytes()
        while True:
            try:
                self._producer.produce(
                    self.topic, key=pointer.key, value=value, on_delivery=self._delivered
                )
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)
        return pointer

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            key: Any = msg.key()
            self._errors.append(f"{key!r}: {err}")

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait for every queued pointer; raise if any was not delivered."""
        left = self._producer.flush(timeout_s)
        if left or self._errors:
            errors, self._errors = self._errors, []
            detail = "; ".join(errors[:3]) or f"{left} still in flight"
            raise SessionStoreError(
                f"sessions topic {self.topic}: pointers not delivered: {detail}"
            )

    def close(self) -> None:
        try:
            self.flush(10.0)
        except SessionStoreError as exc:
            log.error("%s", exc)
