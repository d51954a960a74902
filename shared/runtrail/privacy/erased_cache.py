"""The resume-cache store's copies of an erasure: the entries, open intents and open model
nodes of the erased run, or holding references sealed by the destroyed key, deleted.

Why a step of its own: the resume-cache service keeps what it built from the events in its
store (SQLite or PostgreSQL) and answers lookups from it; tombstones on the cache topic do not
reach it. An entry of an erased run would keep being served (its answer reading ``[erased]``,
handed to an agent as a model's answer) and keyed by the sha256 of the plaintext prompt or
arguments, which confirms a guess. The command deletes them from the store it is given, like
the session store's snapshots; the service deletes them again when it reads the
``run.content_erased`` event (what it held unflushed, or flushed since), in the same
transaction as its positions (:meth:`~runtrail.resume.store.CacheStore.apply`).
"""

from __future__ import annotations

from collections.abc import Collection

from runtrail.privacy.reference import key_marker


def erase_cache_store(url: str, tenant: str, runs: Collection[str], key_id: str | None) -> int:
    """Delete what the erasure covers from the resume-cache store at ``url``; how many
    entries, open intents and open model nodes. A SQLite store whose file does not exist holds
    nothing (it is not created)."""
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import RESUME_ENTRIES
    from runtrail.resume.store import CacheErasure

    if not cache_store_exists(url):
        return 0
    erasure = CacheErasure(tenant, tuple(sorted(runs)), key_marker(key_id) if key_id else None)
    store = open_store(RESUME_ENTRIES, url)
    try:
        return store.erase(erasure).count
    finally:
        store.close()


def cache_store_exists(url: str) -> bool:
    """Whether there may be a store at ``url``: a SQLite store's file exists (a server's
    database is assumed to)."""
    from pathlib import Path

    from runtrail.persistence.urls import MEMORY, sqlite_path

    if not url.lower().startswith("sqlite:"):
        return True
    path = sqlite_path(url, three_slashes="absolute")
    return path == MEMORY or Path(path).exists()
