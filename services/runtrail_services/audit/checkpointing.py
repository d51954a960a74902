"""Sign a checkpoint over the heads of every run in the store, and keep it there.

Shared by the service (periodically) and ``runtrail audit checkpoint`` (on demand). The heads
are read from the store in one query, so the checkpoint commits to what is durably sealed —
never to links still waiting in a service's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from runtrail.audit.checkpoint import Checkpoint, checkpoint_for, sign_checkpoint
from runtrail.audit.note import NoteSigner
from runtrail.audit.store import LinkStore, StoredCheckpoint


@dataclass(frozen=True)
class Signed:
    """The checkpoint of the current heads, and the stored one (None if left unsigned)."""

    checkpoint: Checkpoint
    stored: StoredCheckpoint | None


def sign_and_store(
    store: LinkStore, signer: NoteSigner, origin: str, *, only_if_changed: bool = False
) -> Signed:
    """Sign the current heads and save the checkpoint (with its heads) in the store.

    With ``only_if_changed``, nothing is signed when the latest stored checkpoint already has
    this exact body (same origin, size and root): a second identical note proves nothing new.
    """
    heads = store.heads()
    checkpoint = checkpoint_for(heads, origin)
    if only_if_changed:
        latest = store.latest_checkpoint()
        if latest is not None and latest.checkpoint == checkpoint:
            return Signed(checkpoint, None)
    note = sign_checkpoint(heads, signer, origin)
    return Signed(checkpoint, store.save_checkpoint(note, checkpoint, heads))


def checkpoint_age_s(stored: StoredCheckpoint, now: float) -> float:
    """Seconds from when ``stored`` was made to ``now`` (epoch seconds; 0 if unreadable)."""
    try:
        created = datetime.fromisoformat(stored.created_at)
    except ValueError:
        return 0.0
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return max(0.0, now - created.timestamp())
