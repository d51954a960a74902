"""Tenant and session IDs as path segments and Kafka keys that cannot escape their scope.

Every file path, object key and topic key is scoped by tenant (design principle 6). An ID
becomes one percent-encoded segment, so ``..`` or ``/`` in an ID can never name a path outside
its tenant's folder. The encoding is reversible, so a store lists sessions from names alone;
an ID too long for a file name is stored under a digest of it instead (``~`` marks those, and
listing reads the ID from the file).
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote, unquote

#: Longest encoded segment kept as is (file systems allow 255 bytes per name; we add suffixes).
MAX_SEGMENT = 200
HASHED_PREFIX = "~"


def segment(identifier: str) -> str:
    """``identifier`` as one safe path segment (reversible unless it is very long)."""
    if not identifier:
        raise ValueError("an empty ID cannot name a path segment")
    encoded = quote(identifier, safe="")
    if encoded.startswith("."):  # never ".", "..", nor a hidden file
        encoded = "%2E" + encoded[1:]
    if len(encoded) > MAX_SEGMENT:
        return HASHED_PREFIX + hashlib.sha256(identifier.encode()).hexdigest()
    return encoded


def is_hashed(seg: str) -> bool:
    """Whether a segment is a digest of a long ID (not reversible)."""
    return seg.startswith(HASHED_PREFIX)


def from_segment(seg: str) -> str:
    """The ID a (non-hashed) segment was made from."""
    if is_hashed(seg):
        raise ValueError(f"segment {seg!r} is a digest; read the ID from the snapshot")
    return unquote(seg)


def session_key(tenant_id: str, session_id: str) -> str:
    """The sessions-topic key: tenant and session, each encoded, joined by ``/``."""
    return f"{quote(tenant_id, safe='')}/{quote(session_id, safe='')}"
