"""A stand-in for the one verdict no test can bring about: a Kafka client that lost every broker.

librdkafka was caught dropping a client's last broker during a broker's stop without a
re-bootstrap (``runtrail/kafka/orphan_watch.py``); that cannot be made to order. Tests of what
an owner does then replace the client's :class:`OrphanWatch` with this one: the real client's
own statistics are not listened to, and the verdict holds until the owner replaces the client.
"""

from __future__ import annotations

from typing import Any

from runtrail.kafka.orphan_watch import OrphanWatch


class Orphaned(OrphanWatch):
    """Orphaned until :meth:`restart` (the owner made a new client)."""

    def __init__(self) -> None:
        super().__init__()
        self.replaced = False

    def observe(self, brokers: Any, now: float) -> None:
        pass

    def orphaned(self, now: float) -> bool:
        return not self.replaced

    def restart(self) -> None:
        self.replaced = True
