"""Whether a Kafka client has lost every broker for good, from its statistics.

librdkafka 2.16.0 was caught (its debug log, ``docs/RUNTIME.md``) dropping a client's last
broker during a broker's stop: a Metadata response listed no broker, and the client, unlike
the clients beside it, started no re-bootstrap. With no broker left it cannot send the
Metadata request that would bring one back, nor connect to any, so it stays so until the
process ends. Its statistics then list only logical brokers (a consumer group's coordinator,
"no address yet"). Every other client keeps at least one broker it learned or was configured
with, up or down, through any outage; so a client with none for :data:`ORPHANED_AFTER_S` is
replaced by its owner (the runtime's consumer, a service's output-topic producer, the agent's
publisher).

Fed each ``statistics.interval.ms`` with the statistics (:meth:`OrphanWatch.statistics`, for a
client whose owner reads nothing else of them) or their ``brokers`` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

#: how long a client may know no broker but logical ones before it is stuck: past a
#: re-bootstrap's moment between dropping a broker and adding the configured ones
ORPHANED_AFTER_S = 10.0
#: the statistics' ``source`` of the brokers a client can reach the cluster through
_REAL_SOURCES = frozenset({"learned", "configured"})
#: how often an owner that reads the statistics for this alone has them reported
STATISTICS_INTERVAL_MS = 5000


@dataclass
class OrphanWatch:
    """Since when the client has known no broker but logical ones (None: it knows one)."""

    since: float | None = field(default=None, init=False)

    def observe(self, brokers: Iterable[Mapping[str, Any]] | None, now: float) -> None:
        """One statistics report's ``brokers`` values (None: not looked at), ``now``
        monotonic."""
        if brokers is None or any(b.get("source") in _REAL_SOURCES for b in brokers):
            self.since = None
        elif self.since is None:
            self.since = now

    def statistics(self, data: str, now: float) -> None:
        """One statistics report as librdkafka's ``stats_cb`` gives it (JSON text)."""
        try:
            brokers = orjson.loads(data).get("brokers") or {}
        except (orjson.JSONDecodeError, AttributeError):
            return
        self.observe(brokers.values(), now)

    def orphaned(self, now: float) -> bool:
        """The client has known no broker but logical ones for ``ORPHANED_AFTER_S``."""
        return self.since is not None and now - self.since >= ORPHANED_AFTER_S

    def restart(self) -> None:
        """A new client was made."""
        self.since = None

    def describe(self, now: float) -> str:
        return (
            f"the Kafka client has known no broker for {now - (self.since or now):.0f}s and "
            "does not find one again by itself"
        )
