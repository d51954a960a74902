"""One chunk of spooled records being resent, and how far its acknowledgements reach.

The cursor may only move past a *contiguous* acknowledged prefix: a record after a failed one
stays in the spool even if it was acknowledged, and is sent again next time. That resend can
duplicate it at the broker; consumers drop duplicates by eventId.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from runtrail.publisher.spool import SpoolEntry


class Outcome(enum.Enum):
    PENDING = "pending"
    ACKED = "acked"
    SKIPPED = "skipped"  # unreadable or permanently refused: moved past, never resent
    FAILED = "failed"


@dataclass(slots=True)
class DrainChunk:
    entries: list[SpoolEntry]
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.outcomes:
            self.outcomes = [Outcome.PENDING] * len(self.entries)

    def mark(self, index: int, outcome: Outcome) -> bool:
        """Record the outcome of one record; False if it already had one."""
        if self.outcomes[index] is not Outcome.PENDING:
            return False
        self.outcomes[index] = outcome
        return True

    def fail_rest(self, start: int) -> None:
        """Mark records from ``start`` on as failed (they were never produced)."""
        for i in range(start, len(self.outcomes)):
            self.mark(i, Outcome.FAILED)

    @property
    def pending(self) -> int:
        return sum(1 for o in self.outcomes if o is Outcome.PENDING)

    @property
    def complete(self) -> bool:
        """Every record was acknowledged or skipped."""
        return all(o in (Outcome.ACKED, Outcome.SKIPPED) for o in self.outcomes)

    def acked_prefix(self) -> tuple[int, int]:
        """(byte offset past, record count) of the leading acknowledged-or-skipped records."""
        end, count = -1, 0
        for entry, outcome in zip(self.entries, self.outcomes, strict=True):
            if outcome not in (Outcome.ACKED, Outcome.SKIPPED):
                break
            end, count = entry.end, count + 1
        return end, count
