"""Why an event could not be projected: each reason halts that run's projection, visibly.

Every error names the event it stopped at (type, version, sequence, eventId), so the service
can record the halt with its coordinates and an operator can find the event in the topic.
"""

from __future__ import annotations

from typing import ClassVar

from runtrail.events import Event


class ProjectionError(Exception):
    """Base of every reason a projection stops; ``code`` is a stable, machine-readable reason."""

    code: ClassVar[str] = "projection-error"

    def __init__(self, detail: str, *, event: Event | None = None) -> None:
        self.detail = detail
        self.event_type = event.type if event is not None else None
        self.schema_version = event.schema_version if event is not None else None
        self.sequence = event.sequence if event is not None else None
        self.event_id = event.event_id if event is not None else None
        super().__init__(self._message())

    def _message(self) -> str:
        if self.event_type is None:
            return self.detail
        return (
            f"{self.event_type} v{self.schema_version} at sequence {self.sequence}: {self.detail}"
        )


class UnknownEventVersion(ProjectionError):
    """The (type, schema version) has no projector rule: the projection stops, never guesses."""

    code = "unknown-event-version"


class InvalidEventData(ProjectionError):
    """The payload does not validate against the model of its (type, version)."""

    code = "invalid-event-data"


class InvalidTransition(ProjectionError):
    """The event is valid on its own but cannot follow the run's current state."""

    code = "invalid-transition"


class MissingEvents(ProjectionError):
    """Earlier events of the run never arrived (the runtime dead-lettered them, or they were
    lost). ``apply_event`` itself records such gaps; the projector service and the rebuild
    stop the run instead (``halt_on_gap``), since projecting around a hole is guessing."""

    code = "missing-events"


class SnapshotMismatch(ProjectionError):
    """A snapshot cannot be trusted (other projector version, inconsistent or unreadable)."""

    code = "snapshot-mismatch"
