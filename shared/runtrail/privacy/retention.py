"""Retention: what is older than the policy, or beyond the latest N, is deleted, per store.

Why here, one function per store: each store keeps its own shape of "old" (objects with a
modification time, session snapshots with ``updatedAt``, capture files in day folders, LangGraph
checkpoints ordered by their IDs), and a command or a service applies whichever are configured.
Pruning deletes whole units only (an object, a snapshot, a day of records, a checkpoint with its
writes), never part of an event, so the audit chain of what remains verifies as before; a
reference whose object was pruned reads as the erased marker, like an erased one.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from runtrail.privacy.content_store import ContentStore

if TYPE_CHECKING:
    from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
    from runtrail.sessions.store import AgentSessionStore


def prune_content(store: ContentStore, cutoff_s: float, prefix: str = "") -> int:
    """Delete sealed objects last written before ``cutoff_s`` (epoch seconds); how many."""
    return store.delete_many(
        [found.key for found in store.objects(prefix) if found.modified_s < cutoff_s]
    )


def prune_sessions(store: AgentSessionStore, cutoff_s: float, tenant: str | None = None) -> int:
    """Delete session snapshots not updated since ``cutoff_s``; how many."""
    count = 0
    for summary in store.list(tenant):
        updated = datetime.fromisoformat(summary.updated_at.replace("Z", "+00:00"))
        if updated.timestamp() < cutoff_s and store.delete(summary.tenant_id, summary.session_id):
            count += 1
    return count


def prune_capture_days(root: Path, cutoff_s: float) -> int:
    """Delete the file sink's day folders (``<tenant>/<yyyy-mm-dd>``) that ended before
    ``cutoff_s``: a day is kept while any part of it is younger; how many records files went."""
    cutoff_day = datetime.fromtimestamp(cutoff_s, UTC).date()
    count = 0
    for tenant in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for day in sorted(p for p in tenant.iterdir() if p.is_dir()):
            try:
                when = datetime.strptime(day.name, "%Y-%m-%d").date()
            except ValueError:
                continue  # not a day folder: not ours to judge
            if when < cutoff_day:
                count += sum(1 for p in day.rglob("*") if p.is_file())
                shutil.rmtree(day)
    return count


def prune_checkpoints(saver: RuntrailCheckpointSaver, keep: int) -> int:
    """Keep the latest ``keep`` checkpoints of every thread (per namespace) of the saver's
    tenant, with LangGraph's own prune semantics; how many threads were pruned."""
    threads = saver.backend.threads(saver.tenant_id)
    saver.prune(threads, keep=keep)
    return len(threads)
