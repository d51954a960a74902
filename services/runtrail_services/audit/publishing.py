"""Sends links and tree heads to the audit topic and confirms their delivery.

Links are sent right after the store committed them and confirmed one flush later
(:class:`Outbox`), so the consume loop does not stand still waiting for acknowledgements; only
a confirmed position is recorded as published (see :mod:`runtrail_services.audit.positions`).
A message not acknowledged in time raises :class:`AuditPublishError`, a ``StoreUnavailable``:
the runtime reports not ready and retries, and the links stay queued (or are produced again,
in order) until the broker acknowledges them; a crash meanwhile makes the next start send them
again from the store. The producer is idempotent (``acks=all``), so retries inside one
session do not duplicate; only a crash can, and then with identical bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Producer

from runtrail.audit.link import Link
from runtrail.audit.store import StoredTreeHead
from runtrail.config import Settings
from runtrail.kafka.output_topic import CONFIRM_TIMEOUT_S, OutputTopic
from runtrail.runtime.delivery import Partition
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail_services.audit.messages import (
    KIND_HEADER,
    LINK,
    TREE_HEAD,
    link_messages,
    tree_head_message,
)

ProducerFactory = Callable[[dict[str, Any]], Any]


class AuditPublishError(StoreUnavailable):
    """Messages to the audit topic are not all acknowledged yet (they are kept and retried)."""


class AuditTopic:
    """A producer for the audit topic that can say: everything sent so far is acknowledged."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        producer_factory: ProducerFactory = Producer,
    ) -> None:
        self.topic = topic
        self._timeout_s = CONFIRM_TIMEOUT_S
        self._out = OutputTopic(
            settings,
            topic,
            client_id=f"runtrail-audit-{os.getpid()}",
            producer_factory=producer_factory,
        )
        self.sent = 0
        #: one list for every link (the client copies headers at produce)
        self._link_headers = [(KIND_HEADER, LINK)]

    def _produce(self, key: bytes, value: bytes, kind: bytes) -> None:
        self._out.send(key, value, headers=[(KIND_HEADER, kind)])
        self.sent += 1

    def send_links(self, links: Iterable[Link]) -> int:
        count = self._out.send_many(link_messages(links), self._link_headers)
        self.sent += count
        self._out.poll()
        return count

    def send_tree_head(self, stored: StoredTreeHead) -> None:
        key, value = tree_head_message(stored)
        self._produce(key, value, TREE_HEAD)

    def confirm(self) -> None:
        """Wait until everything sent is acknowledged; :class:`AuditPublishError` if not.

        Nothing is forgotten: what is not acknowledged stays queued (or is produced again, in
        order, if its delivery failed), so a later confirm succeeds only once it all is.
        """
        try:
            self._out.confirm(self._timeout_s)
        except StoreUnavailable as exc:
            raise AuditPublishError(exc.what, exc.detail) from exc

    def close(self) -> None:
        self._out.close()


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
        self.topic.confirm()  # raises while unacknowledged; the links stay queued
        confirmed, links = self._positions, self._links
        self._positions, self._links = {}, 0
        return confirmed, links
