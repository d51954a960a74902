"""Sign a tree head over the heads of every run in the store, and keep it there.

Shared by the service (periodically) and ``runtrail audit tree-head`` (on demand). The heads
are read from the store in one query, so the tree head commits to what is durably sealed —
never to links still waiting in a service's memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtrail.audit.note import NoteSigner
from runtrail.audit.store import LinkStore, StoredTreeHead
from runtrail.audit.tree_head import TreeHead, sign_tree_head, tree_head_for
from runtrail.instants import utc_instant


@dataclass(frozen=True)
class Signed:
    """The tree head of the current heads, and the stored one (None if left unsigned)."""

    tree_head: TreeHead
    stored: StoredTreeHead | None


def sign_and_store(
    store: LinkStore, signer: NoteSigner, origin: str, *, only_if_changed: bool = False
) -> Signed:
    """Sign the current heads and save the tree head (with its heads) in the store.

    With ``only_if_changed``, nothing is signed when the latest stored tree head already has
    this exact body (same origin, size and root): a second identical note proves nothing new.
    """
    heads = store.heads()
    tree_head = tree_head_for(heads, origin)
    if only_if_changed:
        latest = store.latest_tree_head()
        if latest is not None and latest.tree_head == tree_head:
            return Signed(tree_head, None)
    note = sign_tree_head(heads, signer, origin)
    return Signed(tree_head, store.save_tree_head(note, tree_head, heads))


def tree_head_age_s(stored: StoredTreeHead, now: float) -> float:
    """Seconds from when ``stored`` was made to ``now`` (epoch seconds; 0 if unreadable)."""
    created = utc_instant(stored.created_at)
    if created is None:
        return 0.0
    return max(0.0, now - created.timestamp())
