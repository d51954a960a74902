"""How long a consumer has gone without its group coordinator, from the client's statistics.

librdkafka's consumer group is ``up`` once it knows its coordinator and is connected to it;
until then it has no partitions for long (a session times out after ``session.timeout.ms``)
and commits nothing. It leaves ``up`` during every broker outage and comes back by itself when
the broker does, but a client has been seen not to: after a 30 s outage its group stayed
without a coordinator for minutes, a request queued to the coordinator and never sent, while
the other services' clients, through the same outage, rejoined in seconds. What ended such a
state in the reports upstream is a new client. So the runtime reports a group without its
coordinator past ``group_stuck_s`` (readiness and a metric name it) and, holding no partitions
then, replaces its Kafka client (:meth:`ServiceRunner._replace_consumer`): nothing is lost, the
new client starts from the group's committed offsets like a restarted process.

A client that knows no broker at all is stuck sooner (:mod:`runtrail.kafka.orphan_watch`):
that is what the stuck client was, caught with librdkafka's debug log.

Fed each ``statistics.interval.ms`` with the ``cgrp`` object of the statistics (absent for a
consumer that assigns partitions itself, which has no group to lose) and its ``brokers``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtrail.kafka.orphan_watch import OrphanWatch

#: the group state in which librdkafka has its coordinator, connected
UP = "up"


@dataclass
class GroupWatch:
    """Since when the group has been without its coordinator (None: it has it)."""

    stuck_after_s: float
    since: float | None = field(default=None, init=False)
    #: whether the client has known no broker but logical ones (the coordinator's)
    client: OrphanWatch = field(default_factory=OrphanWatch, init=False)
    #: librdkafka's group state and join state at the last statistics
    state: str = field(default=UP, init=False)
    join_state: str = field(default="", init=False)

    def observe(
        self,
        cgrp: Mapping[str, Any] | None,
        now: float,
        brokers: Iterable[Mapping[str, Any]] | None = None,
    ) -> None:
        """One statistics report: ``cgrp`` and ``brokers``' values as librdkafka gives them
        (None: not looked at), ``now`` monotonic."""
        self.client.observe(brokers, now)
        if not cgrp:
            self.since, self.state, self.join_state = None, UP, ""
            return
        self.state = str(cgrp.get("state", UP))
        self.join_state = str(cgrp.get("join_state", ""))
        if self.state == UP:
            self.since = None
        elif self.since is None:
            # stateage would restart at every query-coord <-> wait-coord flip: count from here
            self.since = now

    def without_coordinator_s(self, now: float) -> float:
        """How long the group has been without its coordinator (0 when it has it)."""
        return 0.0 if self.since is None else now - self.since

    def orphaned(self, now: float) -> bool:
        """The client has lost every broker for good (:class:`OrphanWatch`)."""
        return self.client.orphaned(now)

    def stuck(self, now: float) -> bool:
        """Without its coordinator for at least ``stuck_after_s``, or orphaned."""
        coordinator_lost = self.since is not None and now - self.since >= self.stuck_after_s
        return coordinator_lost or self.orphaned(now)

    def restart(self, now: float) -> None:
        """A new client was made: give it a whole ``stuck_after_s`` of its own."""
        if self.since is not None:
            self.since = now
        self.client.restart()

    def describe(self, now: float) -> str:
        states = f"librdkafka group state {self.state}, join state {self.join_state or 'unknown'}"
        if self.orphaned(now):
            return f"{self.client.describe(now)} ({states})"
        return f"no group coordinator for {self.without_coordinator_s(now):.0f}s ({states})"
