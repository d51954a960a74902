"""Per-run sequence checks: gaps, duplicates and reordering are detected, counted and reported.

All of a run's events share a partition, so the checker keeps its state per partition and
drops it when the partition is revoked. A duplicate is an event whose eventId was already seen
at that sequence (a resend after an ambiguous delivery timeout, a replay of a spool): it is
not handed to the service again. State per run is bounded (a window of recent sequences), and
the number of runs tracked per partition is capped, oldest first.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from runtrail.events.native import NATIVE

WINDOW = 256
MAX_RUNS_PER_PARTITION = 50_000


class Verdict(enum.Enum):
    NEXT = "next"  # sequence = last + 1 (or first seen)
    GAP = "gap"  # sequence > last + 1: events missing before it
    DUPLICATE = "duplicate"  # same eventId already seen: skip
    REORDERED = "reordered"  # sequence <= last with a new eventId
    CONFLICT = "conflict"  # a different eventId already holds this sequence: dead-lettered


class SequenceChecks(Protocol):
    """What the consume loop asks of a checker: this module's, or the compiled one."""

    def check(
        self, partition: int, tenant_id: str, run_id: str, sequence: int, event_id: str
    ) -> Verdict: ...

    def holder(self, partition: int, tenant_id: str, run_id: str, sequence: int) -> str | None: ...

    def drop(self, partitions: list[int]) -> None: ...


def new_sequence_checker() -> SequenceChecks:
    """The compiled checker (``runtrail_native.SequenceState``: the same verdicts from the same
    state, held to :class:`SequenceChecker` by ``tests/test_sequencing_native.py``) when the
    extension is there, else :class:`SequenceChecker`. The compiled one also lets the batch
    decoder check a whole run of messages in one call."""
    if NATIVE is None:
        return SequenceChecker()
    verdicts = [Verdict.NEXT, Verdict.GAP, Verdict.DUPLICATE, Verdict.REORDERED, Verdict.CONFLICT]
    checker: SequenceChecks = NATIVE.SequenceState(verdicts, WINDOW, MAX_RUNS_PER_PARTITION)
    return checker


@dataclass(slots=True)
class _RunState:
    last: int
    recent: dict[int, str] = field(default_factory=dict)


class SequenceChecker:
    """Checks each event's (runId, sequence, eventId) against what its partition has shown."""

    def __init__(self) -> None:
        self._runs: dict[int, dict[tuple[str, str], _RunState]] = {}

    def check(
        self, partition: int, tenant_id: str, run_id: str, sequence: int, event_id: str
    ) -> Verdict:
        """Runs are scoped by tenant: two tenants may use the same run ID."""
        key = (tenant_id, run_id)
        runs = self._runs.get(partition)
        if runs is None:
            runs = self._runs[partition] = {}
        state = runs.get(key)
        if state is None:
            if len(runs) >= MAX_RUNS_PER_PARTITION:
                for old in list(runs)[: MAX_RUNS_PER_PARTITION // 10]:
                    del runs[old]
            runs[key] = _RunState(last=sequence, recent={sequence: event_id})
            return Verdict.NEXT
        seen = state.recent.get(sequence)
        if seen is not None:
            return Verdict.DUPLICATE if seen == event_id else Verdict.CONFLICT
        state.recent[sequence] = event_id
        if len(state.recent) > WINDOW:
            del state.recent[next(iter(state.recent))]
        last = state.last
        if sequence == last + 1:
            state.last = sequence
            return Verdict.NEXT
        if sequence > last:
            state.last = sequence
            return Verdict.GAP
        return Verdict.REORDERED

    def holder(self, partition: int, tenant_id: str, run_id: str, sequence: int) -> str | None:
        """The eventId that holds ``sequence`` of the run (after a CONFLICT verdict)."""
        state = self._runs.get(partition, {}).get((tenant_id, run_id))
        return state.recent.get(sequence) if state is not None else None

    def drop(self, partitions: list[int]) -> None:
        for partition in partitions:
            self._runs.pop(partition, None)
