"""Recompute a chain from genesis and report the first link that does not hold.

Each link, in the order presented, must pass, in this order:

1. ``hash`` equals ``sha256(prevHash + "|" + JCS(event))`` (else ``"hash mismatch"``) — an
   event edited without re-sealing, or an edited stored hash;
2. ``prevHash`` equals the hash of the link before it, genesis for the first (else
   ``"prevHash mismatch"``) — a deleted, inserted or reordered link;
3. the event belongs to the same tenant and run as the rest (else ``"run mismatch"``);
4. ``index`` equals its position (else ``"index mismatch"``; the index is a label and is not
   hashed, so it is checked on its own).

``firstBrokenIndex`` is the 0-based **position** of the first failing link in the order
presented, never its stored ``index`` label: the label is not hashed, so whoever tampers with
a chain could otherwise choose what verification reports. Deleting link *k* therefore reports
*k* (the surviving link now at that position, whose ``prevHash`` no longer matches); swapping
links *i* < *j* reports *i*.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runtrail.audit.canonical import GENESIS_HASH, link_hash
from runtrail.audit.errors import MalformedLink
from runtrail.audit.link import Link

HASH_MISMATCH = "hash mismatch"
PREV_HASH_MISMATCH = "prevHash mismatch"
INDEX_MISMATCH = "index mismatch"
RUN_MISMATCH = "run mismatch"
MALFORMED_LINK = "malformed link"
#: What the CLI and the standalone script report for a run or file with no links at all:
#: verifying nothing must not read as "valid" (a wrong tenant, a typo, an emptied export).
NO_LINKS = "no links"
#: Reasons only a trusted tree head can give (see :mod:`runtrail.audit.anchoring`).
TRUNCATED = "truncated"
REWRITTEN = "rewritten"
FORK = "fork"
NOT_IN_TREE_HEAD = "head not in checkpoint"


@dataclass(frozen=True, slots=True)
class ChainVerification:
    """The verdict on one chain; ``detail`` says more than the fixed ``reason`` when it can."""

    valid: bool
    length: int
    first_broken_index: int | None = None
    reason: str | None = None
    head_hash: str | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON verdict: ``{"valid", "length", "firstBrokenIndex", "reason"}``."""
        return {
            "valid": self.valid,
            "length": self.length,
            "firstBrokenIndex": self.first_broken_index,
            "reason": self.reason,
        }


class ChainVerifier:
    """Verifies a chain link by link, so an export of any size streams through it."""

    def __init__(self, tenant_id: str | None = None, run_id: str | None = None) -> None:
        pinned = tenant_id is not None and run_id is not None
        self._identity: tuple[str | None, str | None] | None = (
            (tenant_id, run_id) if pinned else None
        )
        self._expected_prev = GENESIS_HASH
        self._count = 0
        self._failure: tuple[int, str, str | None] | None = None

    @property
    def broken(self) -> bool:
        return self._failure is not None

    def add(self, link: Link) -> None:
        """Check the next link (once broken, later links are only counted)."""
        position = self._count
        self._count += 1
        if self._failure is None:
            self._failure = self._check(link, position)
            if self._failure is None:
                self._expected_prev = link.hash

    def add_malformed(self, detail: str) -> None:
        """Record that the next link could not even be read."""
        position = self._count
        self._count += 1
        if self._failure is None:
            self._failure = (position, MALFORMED_LINK, detail)

    def fail_last(self, reason: str, detail: str | None = None) -> None:
        """Record a failure of the link added last, found outside the chain (its line's labels)."""
        if self._failure is None:
            self._failure = (self._count - 1, reason, detail)

    def result(self) -> ChainVerification:
        if self._failure is not None:
            index, reason, detail = self._failure
            return ChainVerification(False, self._count, index, reason, None, detail)
        head = self._expected_prev if self._count else None
        return ChainVerification(True, self._count, None, None, head)

    def _check(self, link: Link, position: int) -> tuple[int, str, str | None] | None:
        where = f"link at position {position} (labelled {link.index!r})"
        try:
            recomputed = link_hash(link.prev_hash, link.event)
            identity = (link.tenant_id, link.run_id)
        except MalformedLink as exc:
            return (position, MALFORMED_LINK, f"{where}: {exc}")
        if recomputed != link.hash:
            detail = f"{where}: stored {link.hash!r}, recomputed {recomputed}"
            return (position, HASH_MISMATCH, detail)
        if link.prev_hash != self._expected_prev:
            return (position, PREV_HASH_MISMATCH, f"{where}: expected {self._expected_prev}")
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            detail = f"{where}: event of {identity}, chain of {self._identity}"
            return (position, RUN_MISMATCH, detail)
        if link.index != position:
            return (position, INDEX_MISMATCH, f"link at position {position} says {link.index}")
        return None


def nothing_verified() -> ChainVerification:
    """The verdict on an empty chain where one was expected (see :data:`NO_LINKS`)."""
    return ChainVerification(False, 0, None, NO_LINKS)


def verify_links(
    links: Iterable[Link], tenant_id: str | None = None, run_id: str | None = None
) -> ChainVerification:
    """Verify a whole chain from genesis; with ``tenant_id``/``run_id``, also its identity."""
    verifier = ChainVerifier(tenant_id, run_id)
    for link in links:
        verifier.add(link)
    return verifier.result()
