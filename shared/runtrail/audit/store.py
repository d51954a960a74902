"""What an audit link store must do, whatever database is behind it (SQLite, PostgreSQL…).

Each new link also becomes the next leaf of the store's transparency log, numbered in the
transaction that stores it (:mod:`runtrail.audit.tlog`).

The contract that makes the audit service exactly-once into the store: links are append-only,
keyed by (tenant, run, index) and unique per (tenant, eventId); and a batch of links is written
in *one* transaction together with the consumer offsets that follow it, so after a crash the
store holds either the batch and its offsets or neither. A batch that does not extend the
current heads (wrong index, wrong prevHash, an eventId already sealed), or that would move
an offset back, is refused whole. Offsets move back only by :meth:`LinkStore.rewind_offsets`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from runtrail.audit.errors import MalformedLink
from runtrail.audit.link import Link, LinkSummary, RunHead
from runtrail.audit.tree_head import TreeHead
from runtrail.audit.verify import MALFORMED_LINK, ChainVerification, verify_links


class TopicPartition(NamedTuple):
    """A consumer position's key; the stored value is the *next* offset to consume."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class StoredTreeHead:
    """A signed tree head as kept apart from the links, with the heads it commits to."""

    tree_head_id: int
    tree_head: TreeHead
    note: str
    created_at: str


class LinkStore(Protocol):
    """Append-only audit links, consumer offsets and signed tree heads."""

    def append_batch(self, links: Sequence[Link], offsets: Mapping[TopicPartition, int]) -> None:
        """Append ``links`` (in chain order) and set ``offsets``, in one transaction.

        Raises :class:`~runtrail.audit.errors.ChainConflict` (and writes nothing) when a link
        does not extend its run's head or its eventId is already sealed in the tenant, or an
        offset is lower than the stored one (offsets never move back); a link
        identical to one already stored at its (tenant, run, index) is skipped, so a retried
        batch is harmless.
        """
        ...

    def rewind_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Set offsets back or forward, in one transaction: the one write past the "offsets
        never move back" fence, for an operator (``runtrail offsets set``)."""
        ...

    def load_chain(self, tenant_id: str, run_id: str) -> list[Link]:
        """The run's links in index order, exactly as stored (never re-sealed)."""
        ...

    def head(self, tenant_id: str, run_id: str) -> RunHead | None:
        """The run's head from its last stored link; ``None`` if the run has none."""
        ...

    def summaries(self, tenant_id: str, run_id: str) -> list[LinkSummary]:
        """The run's links in index order as envelope fields only (the database reads the
        JSON members; no event is parsed in Python). An unreadable row raises
        :class:`~runtrail.audit.errors.MalformedLink`."""
        ...

    def link_at(self, tenant_id: str, run_id: str, index: int) -> Link | None:
        """The run's link at ``index`` (one primary-key read), or None: a run's first and
        last event, say, without loading its whole chain."""
        ...

    def heads(self) -> list[RunHead]:
        """The head of every run in the store (what a tree head commits to)."""
        ...

    def find_event(self, tenant_id: str, event_id: str) -> Link | None:
        """The link that sealed ``event_id`` in the tenant, if any (for de-duplication)."""
        ...

    def find_events(self, tenant_id: str, event_ids: Iterable[str]) -> dict[str, Link]:
        """The links that sealed any of ``event_ids`` in the tenant, by eventId (one batch)."""
        ...

    def heads_of(self, runs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], RunHead]:
        """The heads of the given (tenant, run) pairs that have links (one batch)."""
        ...

    def stored_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Next offset per partition, for those partitions that have one stored."""
        ...

    def save_tree_head(
        self, note: str, tree_head: TreeHead, heads: Sequence[RunHead]
    ) -> StoredTreeHead:
        """Keep a signed tree head and the heads it commits to (so proofs stay available)."""
        ...

    def latest_tree_head(self) -> StoredTreeHead | None:
        """The most recently saved tree head."""
        ...

    def get_tree_head(self, tree_head_id: int) -> StoredTreeHead | None:
        """A saved tree head by its id."""
        ...

    def find_tree_head(self, tree_head: TreeHead) -> StoredTreeHead | None:
        """The latest saved tree head with this body (origin, size, root), if any."""
        ...

    def committed_heads(self, tree_head_id: int) -> list[RunHead]:
        """The heads a saved tree head commits to, in leaf order."""
        ...

    def log_size(self) -> int:
        """How many leaves the transparency log has (one per stored link)."""
        ...

    def log_entries(self, start: int, end: int) -> list[bytes]:
        """The log's entries ``start`` to ``end`` (exclusive): each a link's 32-byte hash."""
        ...

    def log_index(self, tenant_id: str, run_id: str, index: int) -> int | None:
        """The leaf index of the run's link ``index`` in the log, if it is stored."""
        ...

    def save_log_checkpoint(self, note: str, tree_head: TreeHead) -> StoredTreeHead:
        """Keep a signed tree head of the transparency log."""
        ...

    def latest_log_checkpoint(self) -> StoredTreeHead | None:
        """The log checkpoint saved last (the largest: each extends the one before)."""
        ...

    def save_cosignatures(self, tree_head_id: int, lines: Mapping[str, str]) -> None:
        """Keep witnesses' cosignature lines (by witness name) of a log checkpoint."""
        ...

    def cosignatures(self, tree_head_id: int) -> dict[str, str]:
        """The cosignature lines kept for a log checkpoint, by witness name."""
        ...

    def log_checkpoint_of_size(self, size: int) -> StoredTreeHead | None:
        """The log checkpoint of ``size`` leaves, if one was signed."""
        ...

    def close(self) -> None: ...


def verify_stored(store: LinkStore, tenant_id: str, run_id: str) -> ChainVerification:
    """Verify a run's chain as the store holds it; an unreadable row is a broken link too."""
    try:
        links = store.load_chain(tenant_id, run_id)
    except MalformedLink as exc:
        head = store.head(tenant_id, run_id)
        length = head.length if head is not None else 0
        return ChainVerification(False, length, exc.index, MALFORMED_LINK, detail=str(exc))
    return verify_links(links, tenant_id, run_id)
