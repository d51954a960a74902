"""Spans and log records not recorded (or recorded incomplete), by trace and reason. Pure.

Why by trace: an OTel run is its trace (its run ID is the trace ID), so a count kept per trace
is a count per run, whether or not the run recorded anything. A record that names no trace (a
log record without a span context) is counted under the empty trace ID: it belongs to no run.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the trace ID of what belongs to no run
NO_RUN = ""


@dataclass
class DropCount:
    count: int
    #: the name of one span (or log record event) counted here, to tell what was lost
    sample: str


class DropTally:
    """Counts by (trace ID, reason), each with a sample name; one batch's worth."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], DropCount] = {}

    def add(self, trace_id: str, reason: str, sample: str, n: int = 1) -> None:
        if n <= 0:
            return
        found = self.counts.get((trace_id, reason))
        if found is None:
            self.counts[(trace_id, reason)] = DropCount(n, sample)
        else:
            found.count += n

    def update(self, other: DropTally) -> None:
        for (trace_id, reason), found in other.counts.items():
            self.add(trace_id, reason, found.sample, found.count)

    def __bool__(self) -> bool:
        return bool(self.counts)

    def __len__(self) -> int:
        return len(self.counts)
