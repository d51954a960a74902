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

A client that knows no broker at all is stuck sooner (``ORPHANED_AFTER_S``). That is what the
stuck client was, caught with librdkafka's debug log (2.16.0): while the broker stopped, a
Metadata response listed no broker, the client dropped its only one, and, unlike the clients
beside it, without starting a re-bootstrap; with no broker left it cannot send the Metadata
request that would bring one back, nor connect to any, so it stays so.

Fed each ``statistics.interval.ms`` with the ``cgrp`` object of the statistics (absent for a
consumer that assigns partitions itself, which has no group to lose) and its ``brokers``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: the group state in which librdkafka has its coordinator, connected
UP = "up"
#: how long a client may know no broker but its logical ones (the coordinator's) before it is
#: stuck: past a re-bootstrap's moment between dropping a broker and adding the configured ones
ORPHANED_AFTER_S = 10.0
#: the statistics' ``source`` of the brokers a client can reach the cluster through
_REAL_SOURCES = frozenset({"learned", "configured"})


@dataclass
class GroupWatch:
    """Since when the group has been without its coordinator (None: it has it)."""

    stuck_after_s: float
    since: float | None = field(default=None, init=False)
    #: since when the client has known no broker but logical ones (None: it knows one)
    orphaned_since: float | None = field(default=None, init=False)
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
        if brokers is None or any(b.get("source") in _REAL_SOURCES for b in brokers):
            self.orphaned_since = None
        elif self.orphaned_since is None:
            self.orphaned_since = now
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
        """The client has known no broker but logical ones for ``ORPHANED_AFTER_S``."""
        return self.orphaned_since is not None and now - self.orphaned_since >= ORPHANED_AFTER_S

    def stuck(self, now: float) -> bool:
        """Without its coordinator for at least ``stuck_after_s``, or orphaned."""
        coordinator_lost = self.since is not None and now - self.since >= self.stuck_after_s
        return coordinator_lost or self.orphaned(now)

    def restart(self, now: float) -> None:
        """A new client was made: give it a whole ``stuck_after_s`` of its own."""
        if self.since is not None:
            self.since = now
        self.orphaned_since = None

    def describe(self, now: float) -> str:
        states = f"librdkafka group state {self.state}, join state {self.join_state or 'unknown'}"
        if self.orphaned(now):
            assert self.orphaned_since is not None
            return (
                f"the Kafka client has known no broker for {now - self.orphaned_since:.0f}s "
                f"and does not find one again by itself ({states})"
            )
        return f"no group coordinator for {self.without_coordinator_s(now):.0f}s ({states})"
