"""Sends links and checkpoints to the audit topic and confirms their delivery.

Links are sent right after the store committed them and confirmed one flush later
(:class:`Outbox`), so the consume loop does not stand still waiting for acknowledgements; only
a confirmed position is recorded as published (see :mod:`runtrail_services.audit.positions`).
A message not acknowledged in time raises, the process stops, and the next start sends the
links again. The producer is idempotent (``acks=all``), so retries inside one session do not
duplicate; only a crash can, and then with identical bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, Producer

from runtrail.audit.link import Link
from runtrail.audit.store import StoredCheckpoint
from runtrail.config import Settings
from runtrail.publisher.producer_config import producer_config
from runtrail.runtime.delivery import Partition
from runtrail_services.audit.messages import (
    CHECKPOINT,
    KIND_HEADER,
    LINK,
    checkpoint_message,
    link_message,
)

ProducerFactory = Callable[[dict[str, Any]], Any]


class AuditPublishError(RuntimeError):
    """Messages to the audit topic were not all acknowledged."""


class AuditTopic:
    """A producer for the audit topic that can say: everything sent so far is acknowledged."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        producer_factory: ProducerFactory = Producer,
    ) -> None:
        self.topic = topic
        self._timeout_s = settings.delivery_timeout_ms / 1000 + 5
        config = producer_config(settings, **{"client.id": f"runtrail-audit-{os.getpid()}"})
        self._producer = producer_factory(config)
        self._failed: list[str] = []
        self.sent = 0

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._failed.append(str(err))

    def _produce(self, key: bytes, value: bytes, kind: bytes) -> None:
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value=value,
                    key=key,
                    headers=[(KIND_HEADER, kind)],
                    on_delivery=self._on_delivery,
                )
                break
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain it
        self.sent += 1

    def send_links(self, links: Iterable[Link]) -> int:
        count = 0
        for link in links:
            key, value = link_message(link)
            self._produce(key, value, LINK)
            count += 1
        self._producer.poll(0)
        return count

    def send_checkpoint(self, stored: StoredCheckpoint) -> None:
        key, value = checkpoint_message(stored)
        self._produce(key, value, CHECKPOINT)

    def confirm(self) -> None:
        """Wait until everything sent is acknowledged; :class:`AuditPublishError` if not.

        A failure is sticky: once a message was lost, every later confirm fails too, so no
        caller can take a later, vacuous success for an acknowledgement of the lost message.
        """
        remaining = self._producer.flush(self._timeout_s)
        if remaining or self._failed:
            detail = f"; first error: {self._failed[0]}" if self._failed else ""
            raise AuditPublishError(
                f"{remaining} message(s) to {self.topic} unacknowledged, "
                f"{len(self._failed)} failed{detail}"
            )

    def close(self) -> None:
        self._producer.flush(self._timeout_s)


class Outbox:
    """Links sent but not yet confirmed, with the positions they complete per partition."""

    def __init__(self, topic: AuditTopic) -> None:
        self.topic = topic
        self._positions: dict[Partition, int] = {}
        self._links = 0

    def __bool__(self) -> bool:
        return bool(self._positions)

    def send(self, links: Iterable[Link], positions: dict[Partition, int]) -> None:
        """Send ``links``; everything below ``positions`` is published once they are confirmed."""
        self._links += self.topic.send_links(links)
        self._positions.update(positions)

    def confirm(self) -> tuple[dict[Partition, int], int]:
        """Wait for the acknowledgements: the positions now published and how many links."""
        if not self._positions:
            return {}, 0
        try:
            self.topic.confirm()
        except AuditPublishError:
            # those links are lost to this session: never record them as published
            self._positions, self._links = {}, 0
            raise
        confirmed, links = self._positions, self._links
        self._positions, self._links = {}, 0
        return confirmed, links
