"""The publisher's ledger: every accepted event's index, and which ones are settled.

Every accepted event gets the next index (its place in publish order, continuing the write-ahead
log's). An event is *settled* once it needs nothing more: acknowledged by the broker, found on
the topic after a restart, or dropped for good. The log may be cut before the first unsettled
index and no earlier: that is the invariant the spool committer keeps, so nothing unsettled is
ever lost. Settlement comes in any order (delivery reports, the drain, the recovery scan); the
ledger keeps the first unsettled index and the settled ones past it, so both questions are
answered in constant time per event.
"""

from __future__ import annotations


class Ledger:
    """Indices handed out, and the first one not settled (all before it are)."""

    __slots__ = ("_settled", "first_unsettled", "next_index")

    def __init__(self, first_unsettled: int, next_index: int) -> None:
        if next_index < first_unsettled:
            raise ValueError(
                f"next index {next_index} before the first unsettled {first_unsettled}"
            )
        #: the index the next accepted event gets
        self.next_index = next_index
        #: every index before it is settled
        self.first_unsettled = first_unsettled
        #: settled indices past ``first_unsettled``
        self._settled: set[int] = set()

    def take(self) -> int:
        """The index of a newly accepted event."""
        index = self.next_index
        self.next_index = index + 1
        return index

    def settle(self, index: int) -> None:
        """Event ``index`` needs nothing more (settling one twice, or one before the first
        unsettled, changes nothing)."""
        if index == self.first_unsettled:
            index += 1
            settled = self._settled
            while index in settled:
                settled.remove(index)
                index += 1
            self.first_unsettled = index
        elif index > self.first_unsettled:
            self._settled.add(index)

    def is_settled(self, index: int) -> bool:
        return index < self.first_unsettled or index in self._settled

    @property
    def pending(self) -> int:
        """Accepted events not settled."""
        return self.next_index - self.first_unsettled - len(self._settled)
