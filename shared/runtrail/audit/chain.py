"""One run's hash-chained event log, in memory (seed 000 §5).

Sealing, verifying, restoring from a trusted source and loading what our own store holds are
four different acts, and the class keeps them apart: :meth:`restore` re-seals (the source is
trusted, the hashes are recomputed), :meth:`load_links` never does (stored hashes are evidence;
re-sealing them would launder any tampering), and a chain that failed verification refuses new
links until it is restored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from runtrail.audit.canonical import GENESIS_HASH, canonical_event
from runtrail.audit.errors import (
    AuditError,
    BrokenChainError,
    DuplicateEventConflict,
    MalformedLink,
)
from runtrail.audit.link import Link, RunHead, event_sequence, seal
from runtrail.audit.verify import ChainVerification, verify_links
from runtrail.events.errors import EventError
from runtrail.events.models import Event

log = logging.getLogger(__name__)

EventForm = Mapping[str, Any]


def _form(event: EventForm | Event) -> EventForm:
    return event.json_form() if isinstance(event, Event) else event


class HashChainedEventLog:
    """The chain of one (tenant, run); bound to the first event's run unless given one."""

    def __init__(self, tenant_id: str | None = None, run_id: str | None = None) -> None:
        self._tenant_id = tenant_id
        self._run_id = run_id
        self._links: list[Link] = []
        self._by_event_id: dict[str, int] = {}
        self._sequence = 0
        self._broken: ChainVerification | None = None
        #: Events :meth:`on_event` could not seal (logged, counted, never raised to the agent).
        self.rejected = 0

    # --- reading -------------------------------------------------------------------------
    @property
    def tenant_id(self) -> str | None:
        return self._tenant_id

    @property
    def run_id(self) -> str | None:
        return self._run_id

    @property
    def sequence(self) -> int:
        """Highest publisher ``sequence`` sealed, restored or loaded (0 when none)."""
        return self._sequence

    @property
    def links(self) -> tuple[Link, ...]:
        return tuple(self._links)

    def __len__(self) -> int:
        return len(self._links)

    def link_for_event(self, event_id: str) -> Link | None:
        """The link that sealed ``event_id``, if this chain holds it."""
        position = self._by_event_id.get(event_id)
        return None if position is None else self._links[position]

    def head(self) -> RunHead | None:
        """(tenant, run, length, last hash); ``None`` while the log is bound to no run."""
        if self._tenant_id is None or self._run_id is None:
            return None
        last = self._links[-1].hash if self._links else GENESIS_HASH
        return RunHead(self._tenant_id, self._run_id, len(self._links), last)

    def verify_chain(self) -> ChainVerification:
        """Recompute every link from genesis; the first broken index and why."""
        return verify_links(self._links, self._tenant_id, self._run_id)

    # --- sealing -------------------------------------------------------------------------
    def append(self, event: EventForm | Event) -> Link:
        """Seal ``event`` (its JSON form as written) and return the link.

        An eventId already sealed returns the existing link when the payload is identical (a
        re-delivery) and raises :class:`DuplicateEventConflict` when it is not.
        """
        if self._broken is not None:
            raise BrokenChainError(
                f"chain failed verification at index {self._broken.first_broken_index} "
                f"({self._broken.reason}); restore it before sealing more"
            )
        return self._seal(_form(event))

    def on_event(self, event: EventForm | Event) -> Link | None:
        """Listener entry point: :meth:`append`, but a refusal is logged, never raised."""
        try:
            return self.append(event)
        except (AuditError, EventError) as exc:
            self.rejected += 1
            log.warning("audit chain of run %s did not seal an event: %s", self._run_id, exc)
            return None

    def restore(self, events: Iterable[EventForm | Event]) -> None:
        """Rebuild the chain from a trusted source, re-sealing every hash (seed §5.3).

        All or nothing: if any event cannot be sealed the log is left as it was.
        """
        fresh = HashChainedEventLog(self._tenant_id, self._run_id)
        for event in events:
            fresh._seal(_form(event))
        self._adopt(fresh)

    def load_links(self, links: Iterable[Link]) -> ChainVerification:
        """Take links from our own store or export as they are, hashes included, and verify.

        Nothing is re-sealed. If verification fails the links are still held (so the break
        can be inspected) but :meth:`append` refuses until :meth:`restore`.
        """
        loaded = list(links)
        result = verify_links(loaded, self._tenant_id, self._run_id)
        by_event_id: dict[str, int] = {}
        sequence = 0
        tenant, run = self._tenant_id, self._run_id
        for position, link in enumerate(loaded):
            try:
                by_event_id.setdefault(link.event_id, position)
                if tenant is None or run is None:
                    tenant, run = link.tenant_id, link.run_id
            except MalformedLink:
                continue
            sequence = max(sequence, event_sequence(link.event) or 0)
        self._links = loaded
        self._by_event_id = by_event_id
        self._sequence = sequence
        self._tenant_id, self._run_id = tenant, run
        self._broken = None if result.valid else result
        return result

    # --- internals -----------------------------------------------------------------------
    def _seal(self, event: EventForm) -> Link:
        link = seal(len(self._links), self._head_hash(), event)
        tenant, run = link.tenant_id, link.run_id
        if self._tenant_id is None or self._run_id is None:
            self._tenant_id, self._run_id = tenant, run
        elif (tenant, run) != (self._tenant_id, self._run_id):
            raise MalformedLink(
                f"event {link.event_id} belongs to run {tenant}/{run}, "
                f"not to this chain's {self._tenant_id}/{self._run_id}"
            )
        existing = self.link_for_event(link.event_id)
        if existing is not None:
            if canonical_event(existing.event) == canonical_event(link.event):
                return existing
            raise DuplicateEventConflict(
                f"event {link.event_id} is already sealed at index {existing.index} "
                "with a different payload"
            )
        self._links.append(link)
        self._by_event_id[link.event_id] = link.index
        self._sequence = max(self._sequence, event_sequence(link.event) or 0)
        return link

    def _head_hash(self) -> str:
        return self._links[-1].hash if self._links else GENESIS_HASH

    def _adopt(self, other: HashChainedEventLog) -> None:
        self._tenant_id, self._run_id = other._tenant_id, other._run_id
        self._links = other._links
        self._by_event_id = other._by_event_id
        self._sequence = other._sequence
        self._broken = None
