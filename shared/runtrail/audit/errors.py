"""Why the audit library refused something; every refusal is visible, none is silent."""

from __future__ import annotations


class AuditError(Exception):
    """Base of every audit-library refusal."""


class MalformedLink(AuditError):
    """A link, an export line or an event cannot be read as the format says."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        #: The chain index of the unreadable link, when known.
        self.index = index


class DuplicateEventConflict(AuditError):
    """An eventId already sealed in the chain arrived again with a different payload."""


class BrokenChainError(AuditError):
    """Sealing onto a chain that failed verification would bury the break under new links."""


class ChainConflict(AuditError):
    """A store refused a batch: wrong index or prevHash for the run's head, or a clash."""


class NoteError(AuditError):
    """A signed note or a tree head is malformed, or no trusted signature verifies."""
