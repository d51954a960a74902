"""What a service receives: a validated event with its source coordinates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

from runtrail.events import Event

#: (topic, partition)
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Delivered:
    """One consumed event: current-version ``event``, the ``written`` JSON form, and where it came from.

    ``message`` is the consumed Kafka message itself (a reference, not a copy): dead letters
    are sent with its exact value and headers, whoever wrote them. It is None only for events
    built by hand (tests, replays), which are re-encoded when dead-lettered.
    """

    event: Event
    written: dict[str, Any]
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    message: Message | None = None

    @property
    def source(self) -> Partition:
        return (self.topic, self.partition)
