"""Tamper-evident audit: per-run hash chains, exports, Merkle tree heads and their stores.

``hash = sha256(prevHash + "|" + JCS(event))`` over each run's events in topic order (seed 000
§5); signed RFC 6962 tree heads over all run heads catch what a chain alone cannot (a cut tail,
a re-sealed rewrite, a fork). The exact byte-level format is in :mod:`runtrail.audit.canonical`
and ``docs/AUDIT_FORMAT.md``. Test-only tampering lives in :mod:`runtrail.audit.testing`, which
this package does not import.

Each name below is imported from its submodule on first use (:mod:`runtrail.lazy_exports`):
an importer of one part (the errors, the link format) does not load every other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.audit.anchoring import (
        ForkEvidence,
        find_fork,
        verify_against_tree_head,
        verify_against_tree_heads,
    )
    from runtrail.audit.canonical import GENESIS_HASH, canonical_event, link_hash
    from runtrail.audit.chain import HashChainedEventLog
    from runtrail.audit.errors import (
        AuditError,
        BrokenChainError,
        ChainConflict,
        DuplicateEventConflict,
        MalformedLink,
        NoteError,
    )
    from runtrail.audit.export import read_export, verify_export, write_export
    from runtrail.audit.link import Link, RunHead, seal
    from runtrail.audit.note import NoteSigner, NoteVerifier
    from runtrail.audit.store import LinkStore, StoredTreeHead, TopicPartition, verify_stored
    from runtrail.audit.tree_head import (
        DEFAULT_ORIGIN,
        HeadProof,
        TreeHead,
        head_leaf,
        prove_head,
        sign_tree_head,
        tree_head_for,
        verify_head_proof,
        verify_tree_head,
    )
    from runtrail.audit.verify import ChainVerification, ChainVerifier, verify_links

__getattr__ = lazy_exports(
    __name__,
    {
        ".anchoring": (
            "ForkEvidence",
            "find_fork",
            "verify_against_tree_head",
            "verify_against_tree_heads",
        ),
        ".canonical": ("GENESIS_HASH", "canonical_event", "link_hash"),
        ".chain": ("HashChainedEventLog",),
        ".errors": (
            "AuditError",
            "BrokenChainError",
            "ChainConflict",
            "DuplicateEventConflict",
            "MalformedLink",
            "NoteError",
        ),
        ".export": ("read_export", "verify_export", "write_export"),
        ".link": ("Link", "RunHead", "seal"),
        ".note": ("NoteSigner", "NoteVerifier"),
        ".store": ("LinkStore", "StoredTreeHead", "TopicPartition", "verify_stored"),
        ".tree_head": (
            "DEFAULT_ORIGIN",
            "HeadProof",
            "TreeHead",
            "head_leaf",
            "prove_head",
            "sign_tree_head",
            "tree_head_for",
            "verify_head_proof",
            "verify_tree_head",
        ),
        ".verify": ("ChainVerification", "ChainVerifier", "verify_links"),
    },
)

__all__ = [
    "DEFAULT_ORIGIN",
    "GENESIS_HASH",
    "AuditError",
    "BrokenChainError",
    "ChainConflict",
    "ChainVerification",
    "ChainVerifier",
    "DuplicateEventConflict",
    "ForkEvidence",
    "HashChainedEventLog",
    "HeadProof",
    "Link",
    "LinkStore",
    "MalformedLink",
    "NoteError",
    "NoteSigner",
    "NoteVerifier",
    "RunHead",
    "StoredTreeHead",
    "TopicPartition",
    "TreeHead",
    "canonical_event",
    "find_fork",
    "head_leaf",
    "link_hash",
    "prove_head",
    "read_export",
    "seal",
    "sign_tree_head",
    "tree_head_for",
    "verify_against_tree_head",
    "verify_against_tree_heads",
    "verify_export",
    "verify_head_proof",
    "verify_links",
    "verify_stored",
    "verify_tree_head",
    "write_export",
]
