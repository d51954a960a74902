"""What ``offsets set`` moves where: computed in full, and checked, before anything is written.

Offsets are *next* offsets, as Kafka commits them: to skip the poison event at offset k, set
k+1; to re-read from k, set k. A target outside the log is refused, not clamped silently
(``--shift`` is the exception: it stops at the log's ends and says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from runtrail.instants import utc_epoch_ms
from runtrail_tools.offsets.group import OffsetsError, Watermarks


@dataclass(frozen=True, slots=True)
class Target:
    """One of ``--to-offset N``, ``--to-time ISO``, ``--to-earliest``, ``--to-latest``,
    ``--shift ±N``; ``value`` is the offset, the time in ms, or the shift."""

    kind: str  # "offset" | "time" | "earliest" | "latest" | "shift"
    value: int = 0

    def describe(self) -> str:
        if self.kind == "offset":
            return f"to offset {self.value}"
        if self.kind == "time":
            at = datetime.fromtimestamp(self.value / 1000, UTC).isoformat(timespec="milliseconds")
            return f"to the first event at or after {at}"
        if self.kind == "shift":
            return f"by {self.value:+d}"
        return f"to the {self.kind} offset"


def parse_time(text: str) -> int:
    """ISO 8601 to epoch milliseconds; a time without a zone is UTC."""
    moment = utc_epoch_ms(text)
    if moment is None:
        raise OffsetsError(f"--to-time expects ISO 8601 (2026-12-01T09:30:00Z), got {text!r}")
    return moment


def current_position(
    partition: int,
    committed: Mapping[int, int],
    stored: Mapping[int, int] | None,
    falls_back_to_group: bool,
) -> int | None:
    """Where the service would start ``partition`` now: its store's position (None when it has
    no store), else the group's committed offset, or None when that is the log's beginning or
    the consumer's reset policy."""
    if stored is not None:
        if partition in stored:
            return stored[partition] if stored[partition] >= 0 else None
        if not falls_back_to_group:
            return None  # from the beginning of the partition
    return committed.get(partition)


@dataclass(frozen=True, slots=True)
class Move:
    partition: int
    group_from: int | None
    store_from: int | None
    to: int
    note: str = ""


def plan_moves(
    target: Target,
    partitions: Sequence[int],
    marks: Mapping[int, Watermarks],
    committed: Mapping[int, int],
    stored: Mapping[int, int] | None,
    by_time: Mapping[int, int] | None = None,
    falls_back_to_group: bool = True,
) -> list[Move]:
    """One move per partition; OffsetsError (naming the partition) if any cannot be planned.

    ``stored`` is None for a service without store positions; its current position (what
    ``--shift`` starts from) is then the group's committed offset, else the store's.
    """
    moves = []
    for p in partitions:
        mark = marks[p]
        group_from = committed.get(p)
        store_from = stored.get(p) if stored is not None else None
        note = ""
        if target.kind == "offset":
            to = target.value
            if not mark.start <= to <= mark.end:
                raise OffsetsError(
                    f"offset {to} is outside partition {p}'s log [{mark.start}, {mark.end}] "
                    f"(the next offset, at most the log end {mark.end})"
                )
        elif target.kind == "earliest":
            to = mark.start
        elif target.kind == "latest":
            to = mark.end
        elif target.kind == "time":
            found = (by_time or {}).get(p, -1)
            to = found if found >= 0 else mark.end
            if found < 0:
                note = "no event at or after that time: log end"
        elif target.kind == "shift":
            current = current_position(p, committed, stored, falls_back_to_group)
            if current is None:
                owner = "its store" if stored is not None else "the group"
                raise OffsetsError(
                    f"partition {p} has no position in {owner} to shift from; "
                    "use --to-offset, --to-time, --to-earliest or --to-latest"
                )
            to = min(max(current + target.value, mark.start), mark.end)
            if to != current + target.value:
                note = f"stopped at the log {'start' if to == mark.start else 'end'}"
        else:
            raise OffsetsError(f"unknown target {target.kind!r}")
        moves.append(Move(p, group_from, store_from, to, note))
    return moves
