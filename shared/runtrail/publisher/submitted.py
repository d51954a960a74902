"""What became of one event handed to the publisher."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Submitted:
    """What became of one event: its eventId, or why it was rejected (``reason`` counted in
    the publisher's ``rejected``, ``detail`` for a person)."""

    event_id: str | None
    reason: str | None = None
    detail: str | None = None

    @property
    def accepted(self) -> bool:
        return self.event_id is not None
