"""The dead-letter topic: original key and bytes, plus headers naming the error and the source.

Dead letters must be durable before the runtime commits past them, so :meth:`flush` raises
if any of them failed to be delivered; the runtime then stops without committing, and a
restart redoes the batch (nothing is silently dropped).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger(__name__)

H_REASON = "rt.error.reason"
H_DETAIL = "rt.error.detail"
H_SERVICE = "rt.error.service"
H_TOPIC = "rt.source.topic"
H_PARTITION = "rt.source.partition"
H_OFFSET = "rt.source.offset"
H_TIMESTAMP = "rt.source.timestamp"


class DeadLetterError(RuntimeError):
    """A dead letter could not be made durable: offsets must not move past it."""


class DeadLetterProducer:
    """Produces dead letters and reports failures at :meth:`flush`."""

    def __init__(self, config: dict[str, Any], topic: str, service: str) -> None:
        self.topic = topic
        self.service = service
        self._producer = Producer(
            {**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )
        self._failures: list[str] = []
        self.pending = 0

    def send(
        self,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        source_topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        reason: str,
        detail: str,
    ) -> None:
        out_headers: list[tuple[str, str | bytes | None]] = list(headers or [])
        out_headers += [
            (H_REASON, reason.encode()),
            (H_DETAIL, detail[:2000].encode()),
            (H_SERVICE, self.service.encode()),
            (H_TOPIC, source_topic.encode()),
            (H_PARTITION, str(partition).encode()),
            (H_OFFSET, str(offset).encode()),
            (H_TIMESTAMP, str(timestamp_ms).encode()),
        ]
        log.warning(
            "dead-lettering %s[%d]@%d: %s: %s", source_topic, partition, offset, reason, detail
        )
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value=value,
                    key=key,
                    headers=out_headers,
                    on_delivery=self._on_delivery,
                )
                break
            except BufferError:
                self._producer.poll(0.1)
        self.pending += 1
        self._producer.poll(0)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failures.append(str(err))

    def flush(self, timeout: float = 30.0) -> None:
        if self.pending:
            remaining = self._producer.flush(timeout)
            if remaining:
                raise DeadLetterError(
                    f"{remaining} dead letters still undelivered after {timeout}s"
                )
            self.pending = 0
        if self._failures:
            failures, self._failures = self._failures, []
            raise DeadLetterError(f"dead letters failed: {failures[:3]}")
