"""A snapshot's event log held as each event's canonical bytes, parsed only when read.

A session keeps every event it holds until it is evicted, and saves the whole log at every
save; what a save needs is the canonical bytes (spliced into the stored form and hashed), so
those are what is kept. Holding each event's JSON form beside its bytes as well doubled the
sessions service's memory and its collector's work for forms no save reads. Readers (the
session API, a restore, a merge) get the forms parsed from the bytes, once, when they first
look: the same values a snapshot read back from the store has.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import orjson

JsonForm = dict[str, Any]


class EventLog(Sequence[JsonForm]):
    """The events of a log, in order, from their canonical bytes (immutable)."""

    __slots__ = ("_forms", "canonical")

    def __init__(self, canonical: list[bytes]) -> None:
        #: each event's RFC 8785 bytes, in log order
        self.canonical = canonical
        self._forms: list[JsonForm] | None = None

    def _parsed(self) -> list[JsonForm]:
        if self._forms is None:
            self._forms = [orjson.loads(event) for event in self.canonical]
        return self._forms

    def __len__(self) -> int:
        return len(self.canonical)

    @overload
    def __getitem__(self, index: int) -> JsonForm: ...
    @overload
    def __getitem__(self, index: slice) -> list[JsonForm]: ...
    def __getitem__(self, index: int | slice) -> JsonForm | list[JsonForm]:
        return self._parsed()[index]

    def __iter__(self) -> Iterator[JsonForm]:
        return iter(self._parsed())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLog):
            return self.canonical == other.canonical
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self._parsed() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EventLog({len(self)} events)"
