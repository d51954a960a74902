"""Holding a chain to tree heads the verifier trusts: keys, proofs, forks.

An auditor keeps signed tree heads (and, ideally, the inclusion proofs of the heads they care
about) and the public key. Given those, a chain is checked on its own first, then:

* two trusted tree heads whose proofs give one run two different heads at one length (or two
  heads in one tree) are a **fork** — the log told two stories;
* each tree head's proof must verify and the chain must still reach the head it shows
  (**truncated** / **rewritten** otherwise, :func:`runtrail.audit.verify_against_tree_head`).

A proof comes from a file the auditor kept, or else from the store: the store keeps the heads
of every tree head it signed, and a proof computed from them is checked against the *trusted*
root, so a store that lies about those heads only gets ``head not in tree head``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtrail.audit.anchoring import find_fork, verify_against_tree_head
from runtrail.audit.errors import MalformedLink
from runtrail.audit.keys import load_public_key
from runtrail.audit.link import Link
from runtrail.audit.note import NoteVerifier
from runtrail.audit.store import LinkStore
from runtrail.audit.tree_head import HeadProof, TreeHead, prove_head
from runtrail.audit.verify import FORK, NOT_IN_TREE_HEAD, ChainVerification, verify_links
from runtrail.events.errors import EventError
from runtrail.events.jsonform import loads_strict

_VKEY = re.compile(r"^[^+\s]+\+[0-9a-f]{8}\+[A-Za-z0-9+/=]+$")


def load_verifier(path: Path, key_name: str) -> NoteVerifier:
    """A trusted key from a file: a ``name+id+key`` verifier string, or PEM / raw with a name."""
    data = path.read_bytes()
    text = data.decode("ascii", "replace").strip()
    if _VKEY.match(text):
        return NoteVerifier.from_vkey(text)
    return NoteVerifier(key_name, load_public_key(path))


def read_proof(path: Path) -> HeadProof:
    """A head proof from a file: the output of ``runtrail audit prove`` or a bare proof."""
    try:
        obj: Any = loads_strict(path.read_text("utf-8"))
    except (ValueError, EventError) as exc:
        raise MalformedLink(f"{path}: not JSON ({exc})") from exc
    if isinstance(obj, dict) and "proof" in obj and isinstance(obj["proof"], dict):
        obj = obj["proof"]
    return HeadProof.from_json(obj)


def proof_from_store(
    store: LinkStore, tree_head: TreeHead, tenant_id: str, run_id: str
) -> HeadProof | None:
    """The run's head proof in ``tree head``, from the heads the store kept for it."""
    stored = store.find_tree_head(tree_head)
    if stored is None:
        return None
    try:
        return prove_head(store.committed_heads(stored.tree_head_id), tenant_id, run_id)
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Anchor:
    """A trusted tree head and the proof of the run's head in it (None: none was found)."""

    tree_head: TreeHead
    proof: HeadProof | None


def verify_anchored(
    links: Sequence[Link], tenant_id: str, run_id: str, anchors: Sequence[Anchor]
) -> ChainVerification:
    """The chain on its own, then against every anchor: fork, missing head, cut, rewrite."""
    own = verify_links(links, tenant_id, run_id)
    if not own.valid:
        return own
    proven = [(a.tree_head, a.proof) for a in anchors if a.proof is not None]
    for first, second in itertools.combinations(proven, 2):
        evidence = find_fork(first, second)
        if evidence is not None:
            return ChainVerification(False, len(links), None, FORK, detail=evidence.detail)
    for anchor in anchors:
        proof = anchor.proof
        if proof is None or (proof.head.tenant_id, proof.head.run_id) != (tenant_id, run_id):
            return ChainVerification(
                False,
                len(links),
                None,
                NOT_IN_TREE_HEAD,
                detail=f"no proof of run {tenant_id}/{run_id} in tree head "
                f"{anchor.tree_head.origin} size {anchor.tree_head.size}",
            )
        result = verify_against_tree_head(links, anchor.tree_head, proof)
        if not result.valid:
            return result
    return own


def proof_bundle(note: str, tree_head_id: int, proof: HeadProof) -> dict[str, Any]:
    """What ``runtrail audit prove`` prints: the signed tree head with the head's proof."""
    return {"checkpointId": tree_head_id, "checkpoint": note, "proof": proof.to_json()}
