"""An agent session rebuilt from its events: ``apply``, ``snapshot()``, ``restore(snapshot)``.

The session is a pure function of the *set* of its events, so the same events give the same
session whatever order they arrive in, however often, and whether they come from one
snapshot plus a tail or from the whole topic (seed 002: "replay from zero equals replay from
each valid snapshot"). The rules:

* an event belongs to the session named by its envelope (``tenantId``, ``sessionId``);
* events are keyed by (run, sequence): applying one already held is a no-op, so re-delivery
  after a crash and merging two snapshots are both idempotent;
* the log keeps each run's events in sequence order and interleaves the runs by the time each
  event was recorded (broker log-append time), ties broken by run ID;
* memory and compact results are those of the last ``session.snapshot`` event of the log.

Each event is held as its canonical bytes (what a save splices and hashes), its type and its
place in the timeline; its JSON form is parsed from the bytes when someone reads it.

Nothing here calls a model or a tool: restoring a session only re-reads recorded events.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from runtrail.events import Event
from runtrail.sessions.errors import UntrustedSnapshot
from runtrail.sessions.event_log import JsonForm
from runtrail.sessions.log_digest import LogDigest
from runtrail.sessions.snapshot import CODE_VERSION, AgentSessionSnapshot, MemorySource, seal
from runtrail.whole_numbers import whole_number

SNAPSHOT_EVENT = "session.snapshot"
STEP_END = "STEP_END"


#: Where an event sits in the session's timeline: (recorded at, run ID, sequence).
OrderKey = tuple[str, str, int]
#: One event held: its place, its type, its canonical bytes.
Entry = tuple[OrderKey, object, bytes]


class _RunLog:
    """One run's events in this session, by sequence."""

    __slots__ = ("entries", "ordered")

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}
        self.ordered = True  # entries were inserted in sequence order

    def add(self, run_id: str, sequence: int, recorded: str, kind: object, canon: bytes) -> None:
        if self.entries and sequence < next(reversed(self.entries)):
            self.ordered = False
        self.entries[sequence] = ((recorded, run_id, sequence), kind, canon)

    def in_order(self) -> list[Entry]:
        if not self.ordered:
            self.entries = dict(sorted(self.entries.items()))
            self.ordered = True
        return list(self.entries.values())

    def last_sequence(self) -> int:
        return next(reversed(self.entries)) if self.ordered else max(self.entries)


class AgentSession:
    """The state of one session, kept from its events."""

    def __init__(self, tenant_id: str, session_id: str) -> None:
        if not tenant_id or not session_id:
            raise ValueError("a session needs a tenant ID and a session ID")
        self.tenant_id = tenant_id
        self.session_id = session_id
        self._runs: dict[str, _RunLog] = {}
        self._offsets: dict[str, dict[int, int]] = {}
        self._count = 0
        #: how many ``session.snapshot`` events are held: with none, the memory is None
        #: without a pass over the log (most sessions of agents that publish none)
        self._snapshot_events = 0
        #: the digest state of the last snapshot: the next hashes only what the log gained
        self._log_digest = LogDigest()

    # --- building -----------------------------------------------------------------------------
    def apply(self, event: Event, *, source: tuple[str, int, int] | None = None) -> bool:
        """Add one event (``source`` = topic, partition, offset); False if already held."""
        if event.tenant_id != self.tenant_id or event.session_id != self.session_id:
            raise ValueError(
                f"event {event.event_id} belongs to {event.tenant_id}/{event.session_id}, "
                f"not {self.tenant_id}/{self.session_id}"
            )
        if source is not None:
            self._note_offset(*source)
        run = self._runs.get(event.run_id)
        if run is not None and event.sequence in run.entries:
            return False
        recorded = event.recorded_at or event.occurred_at
        canon = event.canonical_bytes()
        self._insert(event.run_id, event.sequence, recorded, event.type, canon)
        return True

    def applied(self, run_id: str, sequence: int) -> bool:
        """Whether the event (run, sequence) is already held."""
        run = self._runs.get(run_id)
        return run is not None and sequence in run.entries

    def merge(self, snapshot: AgentSessionSnapshot) -> int:
        """Add the events of another snapshot of this session; returns how many were new."""
        self._check_owner(snapshot)
        added = 0
        for form, canon in zip(snapshot.event_log, snapshot.event_bytes(), strict=True):
            run_id, sequence = _coordinates(form)
            if not self.applied(run_id, sequence):
                recorded = str(form.get("recordedAt") or form.get("occurredAt") or "")
                self._insert(run_id, sequence, recorded, form.get("type"), canon)
                added += 1
        for topic, partitions in snapshot.next_offsets.items():
            for partition, offset in partitions.items():
                self._note_offset(topic, int(partition), offset - 1)
        return added

    def _insert(
        self, run_id: str, sequence: int, recorded: str, kind: object, canon: bytes
    ) -> None:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _RunLog()
        run.add(run_id, sequence, recorded, kind, canon)
        self._count += 1
        if kind == SNAPSHOT_EVENT:
            self._snapshot_events += 1

    def _note_offset(self, topic: str, partition: int, offset: int) -> None:
        partitions = self._offsets.setdefault(topic, {})
        if offset + 1 > partitions.get(partition, 0):
            partitions[partition] = offset + 1

    # --- reading ------------------------------------------------------------------------------
    @property
    def revision(self) -> int:
        """Number of events held."""
        return self._count

    @property
    def last_applied_sequence(self) -> dict[str, int]:
        """Per run, the highest sequence applied."""
        return {run_id: run.last_sequence() for run_id, run in self._runs.items()}

    @property
    def next_offsets(self) -> dict[str, dict[int, int]]:
        """Per topic and partition, the offset after the last event applied from it."""
        return {topic: dict(parts) for topic, parts in self._offsets.items()}

    def _log(self) -> list[Entry]:
        """Every event in session order: runs merged by recording time, each in sequence."""
        runs = [self._runs[run_id].in_order() for run_id in sorted(self._runs)]
        if len(runs) == 1:
            return runs[0]  # a fresh list; most sessions hold one run
        return list(heapq.merge(*runs, key=lambda entry: entry[0]))

    def events(self) -> Iterator[JsonForm]:
        """The event log, in session order."""
        for _, _, canon in self._log():
            yield orjson.loads(canon)

    def _memory(self, log: list[Entry]) -> tuple[MemorySource | None, Any, Any]:
        """The memory and compact results of the last ``session.snapshot`` event of ``log``
        (this session's log)."""
        if not self._snapshot_events:
            return None, None, None
        for (_, run_id, sequence), kind, canon in reversed(log):
            if kind == SNAPSHOT_EVENT:
                data: Mapping[str, Any] = orjson.loads(canon).get("data") or {}
                source = MemorySource(
                    run_id=run_id,
                    sequence=sequence,
                    snapshot_ref=data.get("snapshotRef"),
                    digest=data.get("digest"),
                )
                return source, data.get("memory"), data.get("compactResults")
        return None, None, None

    @property
    def memory(self) -> Any:
        return self._memory(self._log())[1]

    @property
    def compact_results(self) -> Any:
        return self._memory(self._log())[2]

    def snapshot(self) -> AgentSessionSnapshot:
        """The session as a sealed snapshot."""
        log = self._log()
        source, memory, compact = self._memory(log)
        return seal(
            tenant_id=self.tenant_id,
            session_id=self.session_id,
            last_applied_sequence=self.last_applied_sequence,
            event_bytes=[canon for _, _, canon in log],
            memory=memory,
            compact_results=compact,
            memory_from=source,
            next_offsets={
                topic: {str(p): o for p, o in sorted(parts.items())}
                for topic, parts in sorted(self._offsets.items())
            },
            log_digest=self._log_digest,
        )

    # --- restoring ----------------------------------------------------------------------------
    def restore(self, snapshot: AgentSessionSnapshot) -> None:
        """Replace this session's state with a verified snapshot's.

        Refuses (:class:`UntrustedSnapshot`) a snapshot of another session, from another code
        version, or whose derived fields (sequences, memory) disagree with its own event log.
        """
        self._check_owner(snapshot)
        if snapshot.code_version != CODE_VERSION:
            raise UntrustedSnapshot(
                f"snapshot of {self._name} was built by {snapshot.code_version}; this is "
                f"{CODE_VERSION}: rebuild the session from the events topic"
            )
        fresh = AgentSession(self.tenant_id, self.session_id)
        if fresh.merge(snapshot) != snapshot.revision:
            raise UntrustedSnapshot(f"snapshot of {self._name} repeats an event of its log")
        source, memory, compact = fresh._memory(fresh._log())
        if (
            fresh.last_applied_sequence != snapshot.last_applied_sequence
            or source != snapshot.memory_from
            or memory != snapshot.memory
            or compact != snapshot.compact_results
        ):
            raise UntrustedSnapshot(
                f"snapshot of {self._name} disagrees with its own event log "
                "(last applied sequences or memory)"
            )
        self._runs, self._offsets, self._count = fresh._runs, fresh._offsets, fresh._count
        self._snapshot_events = fresh._snapshot_events
        self._log_digest = LogDigest()

    @classmethod
    def from_snapshot(cls, snapshot: AgentSessionSnapshot) -> AgentSession:
        session = cls(snapshot.tenant_id, snapshot.session_id)
        session.restore(snapshot)
        return session

    def replay(self, events: Iterable[Event]) -> int:
        """Apply recorded events (no model or tool is called); returns how many were new."""
        return sum(1 for event in events if self.apply(event))

    def _check_owner(self, snapshot: AgentSessionSnapshot) -> None:
        if (snapshot.tenant_id, snapshot.session_id) != (self.tenant_id, self.session_id):
            raise UntrustedSnapshot(
                f"snapshot of {snapshot.tenant_id}/{snapshot.session_id} cannot restore {self._name}"
            )

    @property
    def _name(self) -> str:
        return f"session {self.tenant_id}/{self.session_id}"


def _coordinates(form: JsonForm) -> tuple[str, int]:
    """(run ID, sequence) of a JSON-form event of a snapshot's log."""
    run_id, sequence = form.get("runId"), form.get("sequence")
    number = whole_number(sequence) if isinstance(sequence, str) else None
    if not isinstance(run_id, str) or number is None:
        raise UntrustedSnapshot(f"an event of the log has no run ID or sequence: {form!r:.200}")
    return run_id, number
