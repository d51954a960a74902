"""Seal a batch of delivered events onto their runs' chains, in topic order, in memory.

Per batch: one store query per tenant finds the eventIds already sealed (a producer resend,
or a replay after a crash), one query loads the heads of runs not seen before, then each
event is sealed on its run's head. Nothing is written here: the links wait in
:class:`PendingWork` until the service's flush hands them to the store, which writes them with
their offsets in one transaction while sealing goes on (:attr:`Sealer.writing`: sealed, not
yet readable from the store, so looked up in memory).

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtrail.audit.canonical import canonical_event
from runtrail.audit.errors import MalformedLink
from runtrail.audit.link import Link, RunHead, seal
from runtrail.audit.store import LinkStore
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

    def then(self, later: PendingWork) -> PendingWork:
        """This work followed by ``later``'s, as one (a write that failed, then what was
        sealed meanwhile: written again together, in order)."""
        return PendingWork(
            outgoing=self.outgoing + later.outgoing,
            offsets={**self.offsets, **later.offsets},
            event_ids={**self.event_ids, **later.event_ids},
        )

    def runs(self) -> set[tuple[str, str]]:
        """(tenantId, runId) of every new link."""
        return {(item.link.tenant_id, item.link.run_id) for item in self.outgoing if item.new}

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


def _identity(written: dict[str, Any]) -> tuple[str, str, str] | None:
    """(tenantId, runId, eventId) of the event as written, if all are usable text."""
    values = (written.get("tenantId"), written.get("runId"), written.get("eventId"))
    for value in values:
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            return None
    return values  # type: ignore[return-value]


class Sealer:
    """Turns delivered events into links on the right heads; keeps them pending until flush."""

    def __init__(self, store: LinkStore, heads: HeadCache, dead_letter: DeadLetter) -> None:
        self._store = store
        self._heads = heads
        self._dead_letter = dead_letter
        self.pending = PendingWork()
        #: The work handed to the store and not confirmed written yet: its links are sealed,
        #: but a store read does not see them.
        self.writing: PendingWork | None = None
        #: Per partition, the sealed position found at assignment: events below it were
        #: sealed before and have their stored links published again.
        self.replay_until: dict[Partition, int] = {}

    def seal_batch(self, batch: Sequence[Delivered]) -> BatchCounts:
        counts = BatchCounts()
        pending = self.pending
        items: list[tuple[Delivered, str, str, str]] = []
        for delivered in batch:
            pending.offsets[delivered.source] = delivered.offset + 1
            identity = _identity(delivered.written_form())
            if identity is None:
                self._refuse(delivered, UNSEALABLE, "no usable tenantId/runId/eventId", counts)
                continue
            items.append((delivered, *identity))
        sealed = self._already_sealed(items)
        self._heads.load(
            (d.source, (tenant, run))
            for d, tenant, run, event_id in items
            if (tenant, event_id) not in sealed
        )
        writing = self.writing.event_ids if self.writing is not None else {}
        for delivered, tenant, run, event_id in items:
            earlier = (
                pending.event_ids.get((tenant, event_id))
                or writing.get((tenant, event_id))
                or sealed.get((tenant, event_id))
            )
            if earlier is not None:
                self._again(delivered, earlier, (tenant, event_id) in sealed, counts)
                continue
            head = self._heads.get((tenant, run))
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
                link = seal(
                    head.length, head.hash, delivered.written_form(), (tenant, run, event_id)
                )
            except (MalformedLink, EventError) as exc:
                self._refuse(delivered, UNSEALABLE, str(exc), counts)
                continue
            self._heads.advance(RunHead(tenant, run, link.index + 1, link.hash))
            pending.outgoing.append(Outgoing(delivered.source, link, new=True))
            pending.event_ids[(tenant, event_id)] = link
            counts.sealed += 1
        return counts

    def _already_sealed(
        self, items: Sequence[tuple[Delivered, str, str, str]]
    ) -> dict[tuple[str, str], Link]:
        """Links already in the store for the batch's eventIds: one query per tenant."""
        wanted: dict[str, list[str]] = {}
        writing = self.writing.event_ids if self.writing is not None else {}
        unwritten = self.pending.event_ids
        for _, tenant, _, event_id in items:
            key = (tenant, event_id)
            if key not in unwritten and key not in writing:
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
            same = canonical_event(earlier.event) == canonical_event(delivered.written_form())
        except MalformedLink:
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

    def _sequence_holder(self, tenant: str, run: str, sequence: int) -> str | None:
        """The eventId sealed (or pending) at ``sequence`` of the run, if any: the first one."""
        wanted = str(sequence)
        unwritten = self.pending.outgoing
        if self.writing is not None:
            unwritten = self.writing.outgoing + unwritten
        for item in unwritten:
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

    def hand_over(self) -> PendingWork:
        """The pending work goes to the store: it stays visible as :attr:`writing` until
        :meth:`written` (or :meth:`write_failed`), and a new round starts."""
        assert self.writing is None, "one write at a time"
        work, self.pending = self.pending, PendingWork()
        self.writing = work
        return work

    def written(self) -> None:
        """The work handed over is durable: the store answers for it from now on."""
        self.writing = None

    def write_failed(self) -> None:
        """The store did not take the work handed over: it goes back in front of what was
        sealed since, to be written again with it."""
        if self.writing is not None:
            self.pending = self.writing.then(self.pending)
            self.writing = None

    def drop_partitions(self, partitions: Sequence[Partition]) -> None:
        """Partitions are gone: their unflushed links and their runs' heads with them."""
        self.pending.drop_partitions(partitions)
        if self.writing is not None:
            self.writing.drop_partitions(partitions)
        self._heads.drop_partitions(partitions)
        for partition in partitions:
            self.replay_until.pop(partition, None)
