"""The contract between the runtime and a service.

The runtime hands a service batches of :class:`Delivered` events. A service writes output,
and says when it is durable: offsets are committed only after :meth:`Service.flush` returns,
and never past :meth:`Service.held_offsets` (events still held in open, unwritten state).
Services whose store keeps consumer offsets in the same transaction as their output
(exactly-once into the store) return those offsets from :meth:`Service.on_assigned`, and the
runtime starts each partition there.

What the runtime does for every service, so that services do not:

- poison is dead-lettered before :meth:`Service.process` sees it: undecodable or invalid
  bytes, a value over ``max_event_bytes`` (``too-large``), ``data`` nested deeper than
  ``max_json_depth`` (``too-deep``) or holding NaN/Infinity (``non-finite``), and a second
  eventId at a sequence its run already used (``sequence-conflict``, both eventIds in the
  headers); a same-eventId repeat is a counted duplicate, never delivered twice in a process;
- **one event can never stop a service.** When :meth:`Service.process` raises for a batch,
  the runtime calls it again with one event at a time, in order, and dead-letters each event
  that still raises (``handler-error`` with the exception, ``too-deep`` for RecursionError).
  So ``process`` must (a) accept events again that it already applied from the batch that
  raised, exactly as after a crash redelivery (at least once), and (b) raise for an event
  *before* changing state for it, or leave state it can redo. Services that dedupe by eventId
  or sequence (projector, audit) meet (a) already;
- an output that cannot take writes now is :class:`~runtrail.runtime.unavailable.StoreUnavailable`
  from :meth:`Service.flush` or :meth:`Service.tick`: the runtime keeps the service's state,
  pauses consumption, reports 503, commits nothing and calls them again (backoff) until they
  succeed. ``process`` should not write to outputs; if it raises StoreUnavailable, the batch
  is consumed again later (it must then have kept no state for that batch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.runtime.delivery import Delivered, Partition

#: extra dead-letter headers (name, value)
Headers = list[tuple[str, str | bytes | None]]


class DeadLetterFn(Protocol):
    """Send ``delivered`` (its consumed bytes and headers) to the DLQ with a reason."""

    def __call__(
        self, delivered: Delivered, reason: str, detail: str, extra: Headers | None = None
    ) -> None: ...


def _no_dead_letters(
    delivered: Delivered, reason: str, detail: str, extra: Headers | None = None
) -> None:
    """The default of a context built without a runtime (tests): dead letters go nowhere."""


@dataclass
class ServiceContext:
    """What the runtime gives a service: settings, options, a metrics registry, dead-lettering."""

    settings: Settings
    options: Mapping[str, str] = field(default_factory=dict)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    dead_letter: DeadLetterFn = field(default=_no_dead_letters)


class Service(ABC):
    """A consumer service. Subclasses set ``name`` and implement :meth:`process`."""

    name: ClassVar[str]
    #: Default port of its metrics/health endpoint.
    default_port: ClassVar[int] = 9400

    def __init__(self, context: ServiceContext) -> None:
        self.context = context

    @abstractmethod
    def process(self, batch: Sequence[Delivered]) -> None:
        """Apply a batch (in partition order). Output may stay buffered until :meth:`flush`."""

    def flush(self) -> None:  # noqa: B027  (optional hook)
        """Make the output of everything processed so far durable."""

    def held_offsets(self) -> Mapping[Partition, int]:
        """Per partition, the lowest offset still needed to rebuild open state (commit stops there)."""
        return {}

    def commit_metadata(self) -> Mapping[Partition, str]:
        """Per partition, metadata to commit with a held offset (see :meth:`on_committed`).

        Only used when the commit stops at :meth:`held_offsets`; Kafka stores it atomically with
        the offset (at most ``offset.metadata.max.bytes``, 4096 by default).
        """
        return {}

    #: Set to True to receive the committed offsets and metadata at assignment.
    wants_committed: ClassVar[bool] = False

    def on_committed(self, committed: Mapping[Partition, tuple[int, str | None]]) -> None:  # noqa: B027
        """At assignment, before any event: the group's committed offset and metadata per
        partition (offset -1001 when nothing was committed). Only if ``wants_committed``."""

    def on_assigned(self, partitions: Sequence[Partition]) -> Mapping[Partition, int]:
        """Partitions were assigned; return offsets to start from (if the store keeps them)."""
        return {}

    def on_positions(self, positions: Mapping[Partition, int]) -> None:  # noqa: B027
        """After each batch (even one with nothing to process): the next offset per partition it
        reached, counting the messages the runtime dropped (duplicates) or dead-lettered, which
        the service never sees. A service that stores offsets itself stores these."""

    def on_revoked(self, partitions: Sequence[Partition]) -> None:  # noqa: B027
        """Partitions are gone (after flush and commit): drop their in-memory state."""

    def tick(self, now_ms: int) -> None:  # noqa: B027
        """Called once per loop iteration, with or without events (timers, idle expiry)."""

    def close(self) -> None:  # noqa: B027
        """Release resources; called once at shutdown, after the last flush."""
