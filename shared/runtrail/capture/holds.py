"""Commit points that let a restarted consumer re-form every node exactly once.

A partition is committed at the first offset of its oldest open node (nothing before it is
needed any more). That alone is not enough: a node that began before that offset but has
already closed would be re-read after a crash without its first events and captured again,
truncated, under a new record ID. So each commit point carries, as Kafka commit metadata, the
offsets at which such *straddling* nodes ended. After a restart, :meth:`NodePairer.resume`
installs them as marks: the re-formed tail of a straddler is dropped at its mark, and a
straddling TOOL_RESULT is skipped. Every node that starts at or after the commit point is
re-formed whole, so its record is byte-identical to the one written before the crash.

Metadata is ``rtc1:`` followed by base-36 offsets relative to the commit offset. When it would
exceed the size the broker accepts, the previous commit point is kept: it is still valid, the
consumer just re-reads more after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "rtc1:"
#: Kafka's default ``offset.metadata.max.bytes`` is 4096; leave room for other metadata.
DEFAULT_MAX_METADATA = 3000


@dataclass(frozen=True, slots=True)
class Hold:
    """Commit ``offset`` together with ``metadata``; give both back to ``resume`` later."""

    offset: int
    metadata: str


def _base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
        if not value:
            return out


def encode_marks(offset: int, marks: list[int]) -> str:
    """Commit metadata for the sorted straddler end offsets ``marks`` (all ``>= offset``)."""
    if not marks:
        return ""
    return PREFIX + ",".join(_base36(mark - offset) for mark in marks)


def decode_marks(offset: int, metadata: str | None) -> list[int]:
    """The mark offsets of commit metadata; anything not written by capture has none."""
    if not metadata or not metadata.startswith(PREFIX):
        return []
    try:
        return sorted(offset + int(part, 36) for part in metadata[len(PREFIX) :].split(","))
    except ValueError:
        raise ValueError(f"corrupt capture commit metadata: {metadata[:80]!r}") from None


class PartitionHolds:
    """Open and recently closed node spans of one partition, and marks to honour on resume.

    Nodes are assembled in sequence order, so a node's events need not be read in offset
    order: a node's span is from the lowest to the highest offset of its events, and what a
    re-read must skip of a straddler (its *skips*) is given when it closes.
    """

    __slots__ = ("_closed", "_open", "last_hold", "marks", "position")

    def __init__(self, start: Hold | None = None) -> None:
        self._open: dict[int, int] = {}  # serial -> lowest offset of the node's events
        #: (first, last, skips) of closed nodes spanning more than one offset
        self._closed: list[tuple[int, int, tuple[int, ...]]] = []
        self.marks: set[int] = set(decode_marks(start.offset, start.metadata)) if start else set()
        #: The next offset to read, once known (from ``start`` or from the first event).
        self.position: int | None = start.offset if start else None
        #: The latest commit point handed out (the fallback when metadata would be too big).
        self.last_hold = start

    def seen(self, offset: int) -> None:
        """The partition's next event (offsets arrive in order)."""
        if self.last_hold is None:
            self.last_hold = Hold(offset, "")  # re-reading from here reproduces everything
        self.position = offset + 1

    def opened(self, serial: int, offset: int) -> None:
        """Node ``serial`` holds ``offset``; called again, it lowers the node's first offset."""
        first = self._open.get(serial)
        if first is None or offset < first:
            self._open[serial] = offset

    def closed(self, serial: int, last: int, skips: tuple[int, ...] | None = None) -> None:
        """Node ``serial`` is flushed, expired or discarded; its highest offset is ``last``.

        ``skips`` are the offsets a re-read must skip if the commit point falls inside the
        node (default: ``last``, the closing event).
        """
        first = self._open.pop(serial)
        if first < last:
            self._closed.append((first, last, (last,) if skips is None else skips))

    def tail_dropped(self, offset: int, serial: int | None = None) -> None:
        """At a mark: the tail of a node that began before the resume point ended here.

        Re-reading from any commit point at or below ``offset`` meets this tail again, so
        the mark stays in the metadata of such commit points.
        """
        self.marks.discard(offset)
        if serial is not None:
            self._open.pop(serial, None)
        self._closed.append((-1, offset, (offset,)))

    def hold(self, max_metadata: int, floor: int | None = None) -> Hold | None:
        """Where to commit now; ``None`` when nothing is held (commit the position).

        ``floor`` is the lowest offset read but not processed yet (an event waiting for a
        missing predecessor of its run): the commit never passes it.
        """
        if self.position is None:
            return None  # nothing read yet
        reached = self.position if floor is None else min(self.position, floor)
        pending = [m for m in self.marks if m >= reached]
        self.marks.intersection_update(pending)  # marks passed without being fed are moot
        low = min(self._open.values()) if self._open else None
        if floor is not None and (low is None or floor < low):
            low = floor
        if low is not None:
            offset = low
        elif pending:
            offset = self.position
        else:
            self._closed.clear()
            self.last_hold = Hold(self.position, "")
            return None
        self._closed = [span for span in self._closed if span[1] >= offset]
        ends = {o for first, _, skips in self._closed if first < offset for o in skips}
        marks = sorted(m for m in ends.union(pending) if m >= offset)
        metadata = encode_marks(offset, marks)
        if len(metadata) > max_metadata:
            return self.last_hold
        self.last_hold = Hold(offset, metadata)
        return self.last_hold
