"""Messages a ``consume()`` call hands back for partitions its own rebalance took away.

A rebalance runs inside ``consume()``. librdkafka pauses the assigned partitions before it hands
the revoke over, so what it dequeues after that is dropped; but a message it dequeued just
before can still come back from that call (the version barrier that would purge it is served
later), and one may have come back from an earlier call of a batch still being gathered (after
a backlog the runner's ``_take`` waits for a first message, then takes what came with it in a
second call). Such a message belongs to the assignment that ended. Processed after
``Service.on_revoked`` it would be handled without the partition's state (a service that
rebuilds its state from the commit, such as the OTLP mapper, would map it in the middle of a
trace and number its events again), and the partition would get a position, and a commit,
again. It is left to the partition's next owner, which reads it from the commit (this process
as well, when the partition comes back).

A partition revoked and assigned again within one call keeps that call's messages: the new
assignment's fetch starts behind a barrier which, served in that same call before any of its
messages, purges every message of the old assignment from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import Message

from runtrail.runtime.delivery import Partition


def partition_of(msg: Message) -> Partition:
    return cast(str, msg.topic()), cast(int, msg.partition())


@dataclass(eq=False)
class RebalanceWindow:
    """What the rebalance callbacks of the current ``consume()`` call did."""

    #: revoked or lost during the call
    revoked: set[Partition] = field(default_factory=set)
    #: assigned during the call
    assigned: set[Partition] = field(default_factory=set)

    def opened(self) -> None:
        """A ``consume()`` call starts."""
        self.revoked.clear()
        self.assigned.clear()

    def took_away(self, partitions: Iterable[Partition]) -> None:
        self.revoked.update(partitions)

    def gave(self, partitions: Iterable[Partition]) -> None:
        self.assigned.update(partitions)

    def from_the_call(self, messages: list[Message]) -> list[Message]:
        """The call's own messages, without those of partitions it took away for good."""
        if not self.revoked or not messages:
            return messages
        gone = self.revoked - self.assigned
        return without(messages, gone) if gone else messages

    def from_before(self, messages: list[Message]) -> list[Message]:
        """Messages of earlier calls, without those of partitions this call took away."""
        return without(messages, self.revoked) if self.revoked and messages else messages


def without(messages: list[Message], partitions: set[Partition]) -> list[Message]:
    return [m for m in messages if partition_of(m) not in partitions]
