"""The contract between the runtime and a service.

The runtime hands a service batches of :class:`Delivered` events. A service writes output,
and says when it is durable: offsets are committed only after :meth:`Service.flush` returns.
Everything about offsets goes through one object, the service's
:class:`~runtrail.runtime.checkpoint.Checkpoint` (``context.checkpoint``, see
``docs/ARCHITECTURE.md`` "Commits: the checkpoint contract"):

- a service with open, unwritten state tells it at each flush what it still holds
  (:meth:`~runtrail.runtime.checkpoint.Checkpoint.set_holds`, with commit metadata if
  needed): commits never pass a hold;
- a service whose store keeps consumer offsets in the same transaction as its output
  (exactly-once into the store) says in :meth:`Service.on_assigned` where each partition
  starts (:meth:`~runtrail.runtime.checkpoint.Checkpoint.start_at`); one that resumes from the
  group's commit and its metadata reads it there
  (:meth:`~runtrail.runtime.checkpoint.Checkpoint.group_commits`);
- the positions the consume loop reached, counting the messages the runtime dead-lettered or
  dropped (which the service never sees), are read from it
  (:meth:`~runtrail.runtime.checkpoint.Checkpoint.position`) or heard after each batch
  (:meth:`~runtrail.runtime.checkpoint.Checkpoint.watch`).

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
from runtrail.runtime.checkpoint import Checkpoint
from runtrail.runtime.delivery import Delivered, Partition, RawRecord

#: The most events the runtime decodes and hands to :meth:`Service.process` at once: few
#: enough that they are still in the CPU caches when the service reads them (with 2,000 the
#: decode alone cost about twice as much an event, and capture ran at about half its rate;
#: docs/PERFORMANCE.md, *Chunks that fit the CPU caches*).
PROCESS_CHUNK = 250

#: extra dead-letter headers (name, value)
Headers = list[tuple[str, str | bytes | None]]


class DeadLetterFn(Protocol):
    """Send ``delivered`` (its consumed bytes and headers) to the DLQ with a reason."""

    def __call__(
        self,
        delivered: Delivered | RawRecord,
        reason: str,
        detail: str,
        extra: Headers | None = None,
    ) -> None: ...


def _no_dead_letters(
    delivered: Delivered | RawRecord, reason: str, detail: str, extra: Headers | None = None
) -> None:
    """The default of a context built without a runtime (tests): dead letters go nowhere."""


@dataclass
class ServiceContext:
    """What the runtime gives a service: settings, options, a metrics registry, dead-lettering,
    and the checkpoint (a context built without a runtime gets a checkpoint of its own, whose
    group has committed nothing)."""

    settings: Settings
    options: Mapping[str, str] = field(default_factory=dict)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    dead_letter: DeadLetterFn = field(default=_no_dead_letters)
    checkpoint: Checkpoint = field(default_factory=Checkpoint)


class Service(ABC):
    """A consumer service. Subclasses set ``name`` and implement :meth:`process`."""

    name: ClassVar[str]
    #: Default port of its metrics/health endpoint.
    default_port: ClassVar[int] = 9400
    #: Whether :meth:`process` reads :attr:`Delivered.written` (the JSON form as written, which
    #: the audit chain hashes). A service that does not sets False: the compiled consume
    #: path then builds its events straight from the bytes and hands ``written=None``.
    reads_written: ClassVar[bool] = True
    #: Most messages taken per consume call (one turn of the loop: :meth:`tick` follows it),
    #: unless ``RUNTRAIL_BATCH_SIZE`` says otherwise. A service whose per-batch work pays for
    #: I/O (sessions: one fsync per folder for all of a batch's saves, at its tick) sets a
    #: larger one; :meth:`process` still gets at most :data:`PROCESS_CHUNK` events at a time.
    batch_size: ClassVar[int] = PROCESS_CHUNK
    #: Whether the service keeps what it processes in memory long after its flush (the
    #: sessions service holds each session's event log): the runtime then freezes what
    #: survives each flush out of the cyclic GC's routine collections
    #: (:mod:`runtrail.runtime.gc_tuning`), which otherwise traverse that state again and again.
    keeps_state: ClassVar[bool] = False

    def __init__(self, context: ServiceContext) -> None:
        self.context = context

    @classmethod
    def source_topic(cls, settings: Settings) -> str:
        """The topic the service consumes: the events topic."""
        return settings.events_topic

    @abstractmethod
    def process(self, batch: Sequence[Delivered]) -> None:
        """Apply a batch (in partition order; a consumed batch comes in chunks of at most
        :data:`PROCESS_CHUNK`). Output may stay buffered until :meth:`flush`."""

    def flush(self) -> None:  # noqa: B027  (optional hook)
        """Make the output of everything processed so far durable; a service with open state
        then tells the checkpoint what it still holds (:meth:`Checkpoint.set_holds`)."""

    def on_assigned(self, partitions: Sequence[Partition]) -> None:  # noqa: B027
        """Partitions were assigned, before any of their events: set up state, and tell the
        checkpoint where they start if the store keeps positions (:meth:`Checkpoint.start_at`)."""

    def on_revoked(self, partitions: Sequence[Partition]) -> None:  # noqa: B027
        """Partitions are gone (after flush and commit): drop their in-memory state. No
        event of them comes after this until they are assigned again."""

    def tick(self, now_ms: int) -> None:  # noqa: B027
        """Called once per turn of the loop, with or without events, after the batch taken in
        it (if any) was processed and before a commit: timers, idle expiry, and work done once
        per batch (a service whose ``process`` saw the batch in chunks)."""

    def close(self) -> None:  # noqa: B027
        """Release resources; called once at shutdown, after the last flush."""


class RawService(Service):
    """A service of a topic that holds no runtrail events (the raw OTLP spans the receivers
    forward, :mod:`runtrail_services.otlp_mapper`).

    The runtime hands it each record as consumed (:class:`RawRecord`: no Avro decoding, no
    per-run sequence checks: the records are not events) through the same consume loop,
    checkpoint and commit procedure as every service: holds, flush-before-commit, the batch
    retried one record at a time and dead letters all apply. Subclasses name their topic
    (:meth:`source_topic`) and implement :meth:`process_raw`.
    """

    @classmethod
    @abstractmethod
    def source_topic(cls, settings: Settings) -> str:
        """The topic the service consumes."""

    @abstractmethod
    def process_raw(self, batch: Sequence[RawRecord]) -> None:
        """Apply a batch of records (in partition order), as :meth:`Service.process` does events."""

    def process(self, batch: Sequence[Delivered]) -> None:
        raise TypeError(f"{self.name} takes raw records (process_raw), not events")
