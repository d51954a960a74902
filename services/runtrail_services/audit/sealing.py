"""Seal a batch of delivered events onto their runs' chains, in topic order, in memory.

Per batch: one store query per tenant finds the eventIds already sealed (a producer resend,
or a replay after a crash), one query loads the heads of runs not seen before, then each
event is sealed on its run's head. Nothing is written here: the links wait in
:class:`PendingWork` until the service's flush writes them with their offsets in one
transaction.

An event already sealed is not sealed again. If its payload is the same it is a re-delivery
(counted; its stored link is published again when it lies in the replay window, see
:mod:`runtrail_services.audit.positions`); if it differs, the event is refused to the
dead-letter topic as ``audit-conflict``. An event with no canonical form (an integer beyond
±2^53, say) cannot be sealed and is dead-lettered as ``unsealable``.

A new eventId at a sequence its run already sealed under another eventId (a second writer
reusing sequences) is dead-lettered as ``sequence-conflict``, with both eventIds in the
headers, exactly as the runtime does it for every service: the chain keeps the first event
(its sealed link is the decision), the DLQ holds the second. The runtime catches the
conflicts it can see in a process; this check decides the same from the store after a
restart (the first holder was sealed before the runtime's memory began). It costs nothing in
the normal flow: only an event whose sequence is at most the run's chain length can reuse one
(sequences start at 1), and only then is the run's chain read. Its limit: after a restart, a
reuse of a sequence *beyond* the chain length (the run had gaps) is not recognized here and
is sealed after the first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from runtrail.audit.canonical import canonical_event
from runtrail.audit.errors import MalformedLink
from runtrail.audit.link import Link, RunHead, seal_canonical
from runtrail.audit.store import LinkStore
from runtrail.events import Event
from runtrail.events.errors import EventError
from runtrail.runtime.decoding import SEQUENCE_CONFLICT, conflict_headers
from runtrail.runtime.delivery import Delivered, Partition
from runtrail.runtime.service import DeadLetterFn
from runtrail_services.audit.heads import HeadCache

UNSEALABLE = "unsealable"
CONFLICT = "audit-conflict"

DeadLetter = DeadLetterFn


@dataclass(slots=True)
class Outgoing:
    """A link to publish: ``new`` ones are also to be written to the store."""

    partition: Partition
    link: Link
    new: bool


@dataclass
class PendingWork:
    """Everything processed since the last flush, in processing order."""

    outgoing: list[Outgoing] = field(default_factory=list)
    offsets: dict[Partition, int] = field(default_factory=dict)
    event_ids: dict[tuple[str, str], Link] = field(default_factory=dict)

    def new_links(self) -> list[Link]:
        return [item.link for item in self.outgoing if item.new]

    def all_links(self) -> list[Link]:
        return [item.link for item in self.outgoing]

    def empty(self) -> bool:
        return not self.outgoing and not self.offsets

    def drop_partitions(self, partitions: Iterable[Partition]) -> None:
        gone = set(partitions)
        kept = [item for item in self.outgoing if item.partition not in gone]
        for item in self.outgoing:
            if item.partition in gone and item.new:
                self.event_ids.pop((item.link.tenant_id, item.link.event_id), None)
        self.outgoing = kept
        for partition in gone:
            self.offsets.pop(partition, None)


@dataclass
class BatchCounts:
    sealed: int = 0
    redelivered: int = 0
    republished: int = 0
    refused: dict[str, int] = field(default_factory=dict)


#: A delivered event to seal and its (tenantId, runId, eventId).
_Item = tuple[Delivered, tuple[str, str, str]]
#: The RFC 8785 bytes of a body's JSON form as written (``EventCodec.written_canonical``).
WrittenCanonical = Callable[[bytes | None], bytes]


def _identity(event: Event) -> tuple[str, str, str] | None:
    """(tenantId, runId, eventId) of the event, if all are usable text: those it was written
    with (upcasters lift ``data`` and ``schemaVersion`` only)."""
    tenant, run, event_id = event.tenant_id, event.run_id, event.event_id
    # ``not v or v.isspace()`` is ``not v.strip()`` without copying the strings
    if not tenant or not run or not event_id:
        return None
    if tenant.isspace() or run.isspace() or event_id.isspace():
        return None
    if "\x00" in tenant or "\x00" in run or "\x00" in event_id:
        return None
    return tenant, run, event_id


class Sealer:
    """Turns delivered events into links on the right heads; keeps them pending until flush."""

    def __init__(
        self,
        store: LinkStore,
        heads: HeadCache,
        dead_letter: DeadLetter,
        written_canonical: WrittenCanonical,
    ) -> None:
        self._store = store
        self._heads = heads
        self._dead_letter = dead_letter
        self._written_canonical = written_canonical
        self.pending = PendingWork()
        #: Per partition, the sealed position found at assignment: events below it were
        #: sealed before and have their stored links published again.
        self.replay_until: dict[Partition, int] = {}

    def seal_batch(self, batch: Sequence[Delivered]) -> BatchCounts:
        counts = BatchCounts()
        pending = self.pending
        offsets = pending.offsets
        items: list[_Item] = []
        for delivered in batch:
            offsets[delivered.source] = delivered.offset + 1
            identity = _identity(delivered.event)
            if identity is None:
                self._refuse(delivered, UNSEALABLE, "no usable tenantId/runId/eventId", counts)
                continue
            items.append((delivered, identity))
        sealed = self._already_sealed(items)
        heads = self._heads
        heads.load(
            (d.source, (ids[0], ids[1])) for d, ids in items if (ids[0], ids[2]) not in sealed
        )
        # one loop per event: locals, not attribute lookups (the audit seals every event)
        event_ids = pending.event_ids
        outgoing = pending.outgoing
        head_of, advance = heads.get, heads.advance
        for delivered, ids in items:
            tenant, run, event_id = ids
            key = (tenant, event_id)
            earlier = event_ids.get(key) or sealed.get(key)
            if earlier is not None:
                self._again(delivered, earlier, key in sealed, counts)
                continue
            head = head_of((tenant, run))
            sequence = delivered.event.sequence
            if sequence <= head.length:
                holder = self._sequence_holder(tenant, run, sequence)
                if holder is not None and holder != event_id:
                    self._refuse(
                        delivered,
                        SEQUENCE_CONFLICT,
                        f"run {tenant}/{run} sealed sequence {sequence} as event {holder}; "
                        f"event {event_id} reuses it",
                        counts,
                        conflict_headers(holder, event_id, sequence),
                    )
                    continue
            try:
                link = seal_canonical(head.length, head.hash, self._written(delivered), ids)
            except (MalformedLink, EventError) as exc:
                self._refuse(delivered, UNSEALABLE, str(exc), counts)
                continue
            advance(RunHead(tenant, run, link.index + 1, link.hash))
            outgoing.append(Outgoing(delivered.source, link, new=True))
            event_ids[key] = link
            counts.sealed += 1
        return counts

    def _already_sealed(self, items: Sequence[_Item]) -> dict[tuple[str, str], Link]:
        """Links already in the store for the batch's eventIds: one query per tenant."""
        wanted: dict[str, list[str]] = {}
        pending = self.pending.event_ids
        for _, (tenant, _, event_id) in items:
            if (tenant, event_id) not in pending:
                wanted.setdefault(tenant, []).append(event_id)
        found: dict[tuple[str, str], Link] = {}
        for tenant, event_ids in wanted.items():
            for event_id, link in self._store.find_events(tenant, event_ids).items():
                found[(tenant, event_id)] = link
        return found

    def _again(
        self, delivered: Delivered, earlier: Link, in_store: bool, counts: BatchCounts
    ) -> None:
        """An eventId already sealed: a re-delivery, or a different event reusing the ID."""
        try:
            same = canonical_event(earlier.event) == self._written(delivered)
        except (MalformedLink, EventError):
            same = False
        if not same:
            detail = (
                f"eventId already sealed at index {earlier.index} of run "
                f"{earlier.tenant_id}/{earlier.run_id} with a different payload"
            )
            self._refuse(delivered, CONFLICT, detail, counts)
            return
        counts.redelivered += 1
        if in_store and delivered.offset < self.replay_until.get(delivered.source, -1):
            self.pending.outgoing.append(Outgoing(delivered.source, earlier, new=False))
            counts.republished += 1

    def _written(self, delivered: Delivered) -> bytes:
        """The RFC 8785 bytes of the event as written: of the form the runtime decoded when it
        did (a depth walk needed it, or the delivery was made by hand), else written from the
        consumed body (the audit leaves the form unbuilt: ``reads_written = False``)."""
        if delivered.written is not None:
            return canonical_event(delivered.written)
        if delivered.message is None:
            raise TypeError("a delivery with neither its written form nor its message")
        return self._written_canonical(delivered.message.value())

    def _sequence_holder(self, tenant: str, run: str, sequence: int) -> str | None:
        """The eventId sealed (or pending) at ``sequence`` of the run, if any: the first one."""
        wanted = str(sequence)
        for item in self.pending.outgoing:
            event = item.link.event
            if (
                event.get("sequence") == wanted
                and event.get("runId") == run
                and event.get("tenantId") == tenant
            ):
                return str(event.get("eventId"))
        for link in self._store.load_chain(tenant, run):
            if link.event.get("sequence") == wanted:
                return str(link.event.get("eventId"))
        return None

    def _refuse(
        self,
        delivered: Delivered,
        reason: str,
        detail: str,
        counts: BatchCounts,
        extra: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        if extra:
            self._dead_letter(delivered, reason, detail, extra)
        else:  # callers' 3-argument dead-letter functions (tests) keep working
            self._dead_letter(delivered, reason, detail)
        counts.refused[reason] = counts.refused.get(reason, 0) + 1

    def flushed(self) -> None:
        """The pending work is durable (and published): start a new round."""
        self.pending = PendingWork()

    def drop_partitions(self, partitions: Sequence[Partition]) -> None:
        """Partitions are gone: their unflushed links and their runs' heads with them."""
        self.pending.drop_partitions(partitions)
        self._heads.drop_partitions(partitions)
        for partition in partitions:
            self.replay_until.pop(partition, None)
