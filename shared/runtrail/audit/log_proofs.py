"""Proofs of the transparency log, as the CLI and the audit API hand them out.

Each proof is made against a checkpoint the store signed (the latest by default), and carries
that signed note, so a reader can check the proof on its own: an inclusion proof says link
``index`` of run ``R`` has hash ``H`` and is leaf ``i`` of that checkpoint's tree; a
consistency proof says the tree of ``old`` leaves is a prefix of the tree of ``new``.
"""

from __future__ import annotations

from typing import Any

from runtrail.audit.cosignature import with_cosignatures
from runtrail.audit.store import LinkStore, StoredTreeHead
from runtrail.audit.tlog import LogTree, catch_up, consistency_json, inclusion_json


class NoProof(LookupError):
    """Nothing to prove it against, or nothing to prove (no such link, no such checkpoint)."""


def cosigned_note(store: LinkStore, stored: StoredTreeHead) -> str:
    """A log checkpoint's note with every witness cosignature kept for it."""
    return with_cosignatures(stored.note, list(store.cosignatures(stored.tree_head_id).values()))


def _signed(store: LinkStore, size: int | None) -> StoredTreeHead:
    stored = store.latest_log_checkpoint() if size is None else store.log_checkpoint_of_size(size)
    if stored is None:
        raise NoProof(
            "no log checkpoint signed yet" if size is None else f"no log checkpoint of size {size}"
        )
    return stored


def prove_link(
    store: LinkStore, tree: LogTree, tenant_id: str, run_id: str, index: int,
    size: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``{checkpoint, link, leafIndex, treeSize, entry, proof}`` for one link of a run."""
    signed = _signed(store, size)
    leaf = store.log_index(tenant_id, run_id, index)
    if leaf is None:
        raise NoProof(f"link {index} of {tenant_id}/{run_id} is not in the log")
    if leaf >= signed.tree_head.size:
        raise NoProof(f"link {index} of {tenant_id}/{run_id} is newer than the checkpoint")
    catch_up(tree, store, signed.tree_head.size)
    proof = inclusion_json(tree, leaf, signed.tree_head.size)
    link = {"tenantId": tenant_id, "runId": run_id, "index": index, "hash": proof["entry"]}
    return {"checkpoint": cosigned_note(store, signed), "link": link, **proof}


def prove_consistency(
    store: LinkStore, tree: LogTree, old_size: int, size: int | None = None
) -> dict[str, Any]:
    """``{checkpoint, oldCheckpoint, oldSize, newSize, proof}`` between two signed sizes."""
    signed = _signed(store, size)
    old = _signed(store, old_size)
    if old_size > signed.tree_head.size:
        raise NoProof(f"the old size {old_size} is beyond {signed.tree_head.size}")
    catch_up(tree, store, signed.tree_head.size)
    proof = consistency_json(tree, old_size, signed.tree_head.size)
    return {
        "checkpoint": cosigned_note(store, signed),
        "oldCheckpoint": cosigned_note(store, old),
        **proof,
    }
