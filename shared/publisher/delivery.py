"""Ordered bookkeeping of events handed to the producer but not yet settled.

Every accepted event gets a ticket (its place in publish order). Delivery reports can arrive
out of that order across partitions, and a purge can report queued messages before in-flight
ones, so failed events are not appended to the spool when their report arrives but when every
earlier ticket is settled too. That keeps the spool in publish order, which keeps each run's
events in sequence order when the spool is resent.
"""

from __future__ import annotations

import enum
import itertools
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from runtrail.publisher.spool import SpoolRecord


class SlotState(enum.Enum):
    IN_FLIGHT = "in-flight"  # produced directly, no delivery report yet
    ACKED = "acked"  # acknowledged by the broker
    SPOOL = "spool"  # to be appended to the spool once every earlier ticket is settled
    DROPPED = "dropped"  # permanently refused by the broker (counted as rejected)


@dataclass(slots=True)
class Slot:
    record: SpoolRecord
    state: SlotState


class PendingQueue:
    """Tickets in publish order; :meth:`release` pops the settled prefix. Not thread-safe."""

    def __init__(self) -> None:
        self._slots: OrderedDict[int, Slot] = OrderedDict()
        self._tickets = itertools.count(1)

    def add(self, record: SpoolRecord, state: SlotState) -> int:
        ticket = next(self._tickets)
        self._slots[ticket] = Slot(record, state)
        return ticket

    def settle(self, ticket: int, state: SlotState) -> bool:
        """Mark an in-flight ticket settled; False if it was not in flight (a late report)."""
        slot = self._slots.get(ticket)
        if slot is None or slot.state is not SlotState.IN_FLIGHT:
            return False
        slot.state = state
        return True

    def discard(self, ticket: int) -> None:
        self._slots.pop(ticket, None)

    def release(self) -> Iterator[SpoolRecord]:
        """Pop the settled prefix, yielding the records that must go to the spool, in order."""
        while self._slots:
            ticket, slot = next(iter(self._slots.items()))
            if slot.state is SlotState.IN_FLIGHT:
                return
            del self._slots[ticket]
            if slot.state is SlotState.SPOOL:
                yield slot.record

    def abandon_in_flight(self) -> int:
        """Treat every unsettled ticket as failed (outcome unknown): it will be spooled."""
        count = 0
        for slot in self._slots.values():
            if slot.state is SlotState.IN_FLIGHT:
                slot.state = SlotState.SPOOL
                count += 1
        return count

    @property
    def in_flight(self) -> int:
        return sum(1 for s in self._slots.values() if s.state is SlotState.IN_FLIGHT)

    def __len__(self) -> int:
        return len(self._slots)
