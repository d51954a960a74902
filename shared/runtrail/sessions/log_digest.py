"""The SHA-256 of a snapshot's content, carried from one save of a session to the next.

A snapshot's digest is taken over its canonical bytes, in which the event log sits between
the members sorted before it (``codeVersion``, ``compactResults``) and those after it. A
session's log only grows, and mostly at its end, so each save used to hash again every event
the previous save had hashed: a session of n events saved every k events hashed O(n²/k) bytes.
:class:`LogDigest` keeps the hash's state after the members before the log and the events
hashed so far; the next digest of the same session copies that state and hashes only the
events after them and the members after the log.

The state is reused only when the bytes it covers are still the start of the new content: the
same members before the log and the same events first (compared as a list, which takes each
element's identity first: a few nanoseconds an event, against hashing its bytes). An event
inserted before the end (a run recorded before the others, a merge) can reorder what the
previous save hashed, and the digest is then taken over the whole content again.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashlib import _Hash


class LogDigest:
    """One session's digest state: the members before its log, and its events hashed."""

    __slots__ = ("_events", "_head", "_state")

    def __init__(self) -> None:
        self._head = b""
        #: the events hashed into the state, in order
        self._events: list[bytes] = []
        self._state: _Hash | None = None

    def digest(self, head: bytes, events: list[bytes], tail: bytes) -> str:
        """The hex SHA-256 of ``head``, the events joined by commas, then ``tail``; the state
        after the events is kept for the next call."""
        hashed = len(self._events)
        state = self._resumed(head, events)
        if state is None:
            state = hashlib.sha256(head)
            state.update(b",".join(events))
        elif hashed < len(events):
            state.update(b"," + b",".join(events[hashed:]))
        self._head, self._events, self._state = head, events, state.copy()
        state.update(tail)
        return state.hexdigest()

    def _resumed(self, head: bytes, events: list[bytes]) -> _Hash | None:
        """A copy of the kept state if it covers the start of this content, else None."""
        hashed = len(self._events)
        if self._state is None or not hashed or head != self._head or len(events) < hashed:
            return None
        if events[:hashed] != self._events:
            return None
        return self._state.copy()
