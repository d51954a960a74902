"""What the service knows about each session it holds, and when a save is due."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtrail.runtime import Partition
from runtrail.sessions import AgentSession, AgentSessionSnapshot
from runtrail.sessions.session import STEP_END


@dataclass(slots=True)
class Tracked:
    """One session in memory: its state, what the store holds, what is not saved yet."""

    session: AgentSession
    #: Digest of the snapshot the store holds as far as we know (None: none stored).
    stored_digest: str | None
    #: Per partition, the offset of the first event applied since the last save: the runtime
    #: must not commit past it, so a crash re-reads what the store does not have.
    first_unsaved: dict[Partition, int] = field(default_factory=dict)
    unsaved: int = 0
    #: Why a save is due (None: not due).
    due: str | None = None
    #: A saved snapshot whose pointer is not on the sessions topic yet.
    unpublished: AgentSessionSnapshot | None = None
    touched_ms: int = 0
    #: Why the session is not saved (its stored snapshot cannot be trusted).
    halted: str | None = None

    @property
    def dirty(self) -> bool:
        return bool(self.first_unsaved)

    def held(self, partition: Partition, offset: int) -> None:
        """An event at ``offset`` is not saved yet."""
        if partition not in self.first_unsaved:
            self.first_unsaved[partition] = offset

    def partitions(self) -> set[Partition]:
        """Every partition the session has events from (saved or not)."""
        held = set(self.first_unsaved)
        for topic, parts in self.session.next_offsets.items():
            held.update((topic, p) for p in parts)
        return held

    def saved(self, snapshot: AgentSessionSnapshot) -> None:
        self.stored_digest = snapshot.digest
        self.first_unsaved.clear()
        self.unsaved = 0
        self.due = None
        self.unpublished = snapshot


@dataclass(frozen=True)
class SavePolicy:
    """Every N unsaved events, at STEP_END, and when a session has been quiet too long."""

    every_n_events: int
    at_step_end: bool
    idle_ms: int

    def after_event(self, tracked: Tracked, event_type: str) -> str | None:
        """The trigger that makes a save due after an applied event, if any."""
        if self.at_step_end and event_type == STEP_END:
            return "step_end"
        if self.every_n_events and tracked.unsaved >= self.every_n_events:
            return "every_n"
        return None

    def idle(self, tracked: Tracked, now_ms: int) -> bool:
        return tracked.dirty and now_ms - tracked.touched_ms >= self.idle_ms
