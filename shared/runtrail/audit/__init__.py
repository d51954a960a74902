"""Tamper-evident audit: per-run hash chains, exports, Merkle checkpoints and their stores.

``hash = sha256(prevHash + "|" + JCS(event))`` over each run's events in topic order (seed 000
§5); signed RFC 6962 checkpoints over all run heads catch what a chain alone cannot (a cut tail,
a re-sealed rewrite, a fork). The exact byte-level format is in :mod:`runtrail.audit.canonical`
and ``docs/AUDIT_FORMAT.md``. Test-only tampering lives in :mod:`runtrail.audit.testing`, which
this package does not import.
"""

from runtrail.audit.anchoring import (
    ForkEvidence,
    find_fork,
    verify_against_checkpoint,
    verify_against_checkpoints,
)
from runtrail.audit.canonical import GENESIS_HASH, canonical_event, link_hash
from runtrail.audit.chain import HashChainedEventLog
from runtrail.audit.checkpoint import (
    DEFAULT_ORIGIN,
    Checkpoint,
    HeadProof,
    checkpoint_for,
    head_leaf,
    prove_head,
    sign_checkpoint,
    verify_checkpoint,
    verify_head_proof,
)
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
from runtrail.audit.store import LinkStore, StoredCheckpoint, TopicPartition, verify_stored
from runtrail.audit.verify import ChainVerification, ChainVerifier, verify_links

__all__ = [
    "DEFAULT_ORIGIN",
    "GENESIS_HASH",
    "AuditError",
    "BrokenChainError",
    "ChainConflict",
    "ChainVerification",
    "ChainVerifier",
    "Checkpoint",
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
    "StoredCheckpoint",
    "TopicPartition",
    "canonical_event",
    "checkpoint_for",
    "find_fork",
    "head_leaf",
    "link_hash",
    "prove_head",
    "read_export",
    "seal",
    "sign_checkpoint",
    "verify_against_checkpoint",
    "verify_against_checkpoints",
    "verify_checkpoint",
    "verify_export",
    "verify_head_proof",
    "verify_links",
    "verify_stored",
    "write_export",
]
