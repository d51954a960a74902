"""What a service receives: a validated event with its source coordinates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtrail.events import Event

#: (topic, partition)
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Delivered:
    """One consumed event: current-version ``event``, the ``written`` JSON form, and where it came from."""

    event: Event
    written: dict[str, Any]
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None

    @property
    def source(self) -> Partition:
        return (self.topic, self.partition)
