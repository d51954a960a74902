"""Holding a chain to a trusted, signed tree head: truncation, rewrites and forks.

The chain's own hashes catch edits that were not re-sealed. What they cannot catch, a
tree head signed earlier can, given the inclusion proof of the run's head ``(L, H)`` in it:

* ``"truncated"`` — the chain now has fewer than ``L`` links (its tail was cut);
  ``firstBrokenIndex`` is the first missing index;
* ``"rewritten"`` — the chain verifies on its own, but link ``L - 1`` does not have hash ``H``:
  the history the tree head committed to was changed and re-sealed after it, or this reader is
  shown a different branch than the one a tree head committed to;
* ``"fork"`` — two signed statements put different heads at one length of one run (or two
  heads of one run in one tree): the log told two stories, no chain needed to prove it.

A chain longer than ``L`` whose link ``L - 1`` matches is fine: the run went on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from runtrail.audit.link import Link
from runtrail.audit.tree_head import HeadProof, TreeHead, verify_head_proof
from runtrail.audit.verify import (
    FORK,
    NOT_IN_TREE_HEAD,
    REWRITTEN,
    TRUNCATED,
    ChainVerification,
    verify_links,
)


def verify_against_tree_head(
    links: Sequence[Link], tree_head: TreeHead, proof: HeadProof
) -> ChainVerification:
    """Verify ``links`` from genesis, then hold them to the head ``proof`` shows in ``tree head``.

    ``tree head`` must already be verified (see :func:`~runtrail.audit.tree_head.
    verify_tree_head`); the proof is checked here.
    """
    head = proof.head
    if proof.tree_size != tree_head.size:
        # not evidence of tampering: a proof answers for the one tree head it was made against
        return ChainVerification(
            False,
            len(links),
            None,
            NOT_IN_TREE_HEAD,
            detail=(
                f"the proof is for a tree head of {proof.tree_size} run heads and this tree head "
                f"has {tree_head.size}: verify with the tree head the proof was made against "
                "(a bundle or proof file holds it), or prove the run again against this one"
            ),
        )
    if not verify_head_proof(proof, tree_head):
        return ChainVerification(
            False, len(links), None, NOT_IN_TREE_HEAD, detail="inclusion proof does not verify"
        )
    own = verify_links(links, head.tenant_id, head.run_id)
    if not own.valid:
        return own
    if len(links) < head.length:
        return ChainVerification(
            False,
            len(links),
            len(links),
            TRUNCATED,
            detail=f"tree head {tree_head.origin} has {head.length} links for this run",
        )
    if head.length > 0 and links[head.length - 1].hash != head.hash:
        return ChainVerification(
            False,
            len(links),
            head.length - 1,
            REWRITTEN,
            detail=f"hash committed to at index {head.length - 1} is {head.hash}",
        )
    return own


def verify_against_tree_heads(
    links: Sequence[Link], anchors: Sequence[tuple[TreeHead, HeadProof]]
) -> ChainVerification:
    """:func:`verify_against_tree_head` for each anchor; the first failure, else valid."""
    result = verify_links(links)
    for tree_head, proof in anchors:
        result = verify_against_tree_head(links, tree_head, proof)
        if not result.valid:
            return result
    return result


@dataclass(frozen=True, slots=True)
class ForkEvidence:
    """Two signed, verified heads of one run that cannot both be true."""

    reason: ClassVar[str] = FORK
    tenant_id: str
    run_id: str
    first: HeadProof
    second: HeadProof
    detail: str


def find_fork(
    first: tuple[TreeHead, HeadProof], second: tuple[TreeHead, HeadProof]
) -> ForkEvidence | None:
    """Fork evidence if both proofs verify in their tree heads and contradict each other.

    Contradiction: one run, one length, two hashes; or one tree (same origin, size and root)
    holding two different heads of one run. Heads of different lengths in different
    tree heads need the chain to compare (:func:`verify_against_tree_heads`).
    """
    (cp_a, proof_a), (cp_b, proof_b) = first, second
    if not (verify_head_proof(proof_a, cp_a) and verify_head_proof(proof_b, cp_b)):
        return None
    a, b = proof_a.head, proof_b.head
    if (a.tenant_id, a.run_id) != (b.tenant_id, b.run_id) or a == b:
        return None
    same_tree = (cp_a.origin, cp_a.size, cp_a.root_hash) == (cp_b.origin, cp_b.size, cp_b.root_hash)
    if a.length == b.length:
        detail = f"two hashes at length {a.length}: {a.hash} and {b.hash}"
    elif same_tree:
        detail = f"one tree holds two heads: lengths {a.length} and {b.length}"
    else:
        return None
    return ForkEvidence(a.tenant_id, a.run_id, proof_a, proof_b, detail)
