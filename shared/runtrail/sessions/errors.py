"""Why a session snapshot could not be stored, read or trusted.

Each error names *where* the snapshot lives (a file path, a table row, an object key), because
the person who reads it has to go and look at that place.
"""

from __future__ import annotations


class SessionStoreError(RuntimeError):
    """A session store could not do what was asked (I/O, database, configuration)."""


class CorruptSnapshot(SessionStoreError):
    """A stored snapshot is unreadable or its digest does not match its content: refused."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"corrupted session snapshot {where}: {reason}")
        self.where = where
        self.reason = reason


class UntrustedSnapshot(SessionStoreError):
    """A well-formed snapshot that this code must not build on (seed 002: snapshots are caches,
    verified before use): written by another code version, or for another session."""
