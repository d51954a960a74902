"""The contract of a shared cache that a local :class:`~runtrail.resume.cache.ResumeCache` falls
back to: the resume-cache service over HTTP, or the compacted cache topic read directly.

A lookup carries ``min_offsets`` — per partition of the events topic, the highest offset the
source must have consumed before it may answer "miss" (read-your-writes). A hit never waits.
Every failure to answer, including "not caught up in time", raises
:class:`~runtrail.resume.errors.CacheUnavailable`; the cache turns it into an untrusted miss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypedDict, Unpack

from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.keys import Kind, Scope


@dataclass(frozen=True, slots=True)
class Lookup:
    """A source's answer: the entry (a hit), or a trustworthy miss with the run's open intent
    for the same key, if its TOOL_CALL was recorded without a TOOL_RESULT."""

    entry: CacheEntry | None
    intent: Intent | None = None


class Ask(TypedDict):
    """What a lookup names (keyword arguments of every ``lookup``): the entry's tenant, run,
    kind, key and scope, and the read-your-writes ``min_offsets``."""

    tenant: str
    run_id: str
    kind: Kind
    key: str
    scope: Scope
    min_offsets: Mapping[int, int]


class CacheSource(Protocol):
    """Where the entries recorded by other processes (or an earlier life of this one) are."""

    def lookup(self, **ask: Unpack[Ask]) -> Lookup: ...

    def run_state(
        self, *, tenant: str, run_id: str, min_offsets: Mapping[int, int]
    ) -> RunState: ...

    def close(self) -> None: ...


def merge_offsets(*maps: Mapping[int, int] | None) -> dict[int, int]:
    """Per partition, the highest of the offsets given."""
    merged: dict[int, int] = {}
    for offsets in maps:
        for partition, offset in (offsets or {}).items():
            if offset > merged.get(partition, -1):
                merged[partition] = offset
    return merged


def format_offsets(offsets: Mapping[int, int]) -> str:
    """``p:o,p:o`` — how offsets travel in a query string."""
    return ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def parse_offsets(text: str | None) -> dict[int, int]:
    """The inverse of :func:`format_offsets`; raises ValueError on anything else."""
    offsets: dict[int, int] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        partition, sep, offset = item.partition(":")
        if not sep:
            raise ValueError(f"expected PARTITION:OFFSET, got {item!r}")
        p, o = int(partition), int(offset)
        if p < 0:
            raise ValueError("a partition is not negative")
        offsets[p] = max(o, offsets.get(p, -1))
    return offsets
