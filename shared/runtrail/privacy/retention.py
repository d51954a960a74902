"""Retention: what is older than the policy, or beyond the latest N, is deleted, per store.

Why here, one function per store: each store keeps its own shape of "old" (objects with a
modification time, session snapshots with ``updatedAt``, capture records in day folders or
day prefixes, resume-cache entries with the time they were written, LangGraph checkpoints
ordered by their IDs, large session snapshots' blobs with the time they were uploaded), and ``runtrail prune`` and the services
(:mod:`runtrail.privacy.retention_policy`) apply whichever are configured through these same
functions. Pruning deletes whole units only (an object, a snapshot, a day of records, an entry,
a checkpoint with its writes), never part of an event, so the audit chain of what remains
verifies as before; a reference whose object was pruned reads as the erased marker, like an
erased one. A store with a compacted topic beside it (session pointers, cache entries) is given
``forget``, which writes the tombstones first: if the topic refuses them nothing is deleted,
and the next pass tries again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runtrail.instants import utc_instant
from runtrail.privacy.content_store import StoredObject

if TYPE_CHECKING:
    from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver
    from runtrail.resume.store import CacheStore, StoredEntryKey
    from runtrail.sessions.blobs import SnapshotBlobStore
    from runtrail.sessions.checkpoints import CheckpointBackend
    from runtrail.sessions.store import AgentSessionStore

#: Writes the topic tombstones of what is about to be deleted (tenant + ID, or an entry key).
Forget = Callable[[Sequence[Any]], None]


class ObjectsWithAge(Protocol):
    """A store of objects that each have a write time: the content store, the snapshot blobs."""

    def objects(self, prefix: str = "") -> Iterator[StoredObject]: ...

    def delete_many(self, keys: Iterable[str]) -> int: ...


def prune_content(
    store: ObjectsWithAge, cutoff_s: float, prefix: str = "", keep: Sequence[str] = ()
) -> int:
    """Delete objects last written before ``cutoff_s`` (epoch seconds), except those under a
    prefix in ``keep``; how many."""
    kept = tuple(keep)
    return store.delete_many(
        [
            found.key
            for found in store.objects(prefix)
            if found.modified_s < cutoff_s and not found.key.startswith(kept)
        ]
    )


def prune_session_blobs(
    blobs: SnapshotBlobStore,
    cutoff_s: float,
    tenant: str | None = None,
    spare: Collection[tuple[str, str]] = (),
) -> int:
    """Delete large snapshots' blobs uploaded before ``cutoff_s``; how many. A blob is
    uploaded once its snapshot is saved, so an older one belongs to a snapshot saved before
    the cutoff: one :func:`prune_sessions` deletes by the same cutoff, or one a later save
    replaced. ``spare``: ``(tenant, session)`` whose blobs stay (as in :func:`prune_sessions`)."""
    from runtrail.sessions.blobs import session_prefix
    from runtrail.sessions.naming import segment

    keep = [session_prefix(t, s) for t, s in spare]
    return prune_content(blobs, cutoff_s, f"{segment(tenant)}/" if tenant else "", keep)


def prune_sessions(
    store: AgentSessionStore,
    cutoff_s: float,
    tenant: str | None = None,
    forget: Forget | None = None,
    spare: Callable[[tuple[str, str]], bool] | None = None,
) -> int:
    """Delete session snapshots not updated since ``cutoff_s``; how many. ``forget`` gets
    their ``(tenant, session)`` first; ``spare`` names those kept whatever their age (a
    service's sessions in memory: their next save expects the stored snapshot)."""
    doomed = []
    for summary in store.list(tenant):
        updated = utc_instant(summary.updated_at)
        if updated is None:
            raise ValueError(
                f"session {summary.session_id!r} has no time as updatedAt: {summary.updated_at!r}"
            )
        key = (summary.tenant_id, summary.session_id)
        if updated.timestamp() < cutoff_s and not (spare is not None and spare(key)):
            doomed.append(key)
    if doomed and forget is not None:
        forget(doomed)
    return sum(1 for t, s in doomed if store.delete(t, s))


def prune_cache_entries(store: CacheStore, cutoff_s: float, forget: Forget | None = None) -> int:
    """Delete resume-cache entries written before ``cutoff_s``; how many. ``forget`` gets their
    keys first. A pruned entry is a miss: the agent calls the model or tool again."""
    doomed: list[StoredEntryKey] = store.entries_written_before(int(cutoff_s * 1000))
    if doomed and forget is not None:
        forget(doomed)
    return store.delete_entries(doomed)


def prune_capture(sink: Any, cutoff_s: float) -> int:
    """Delete the capture sink's days (``<tenant>/<yyyy-mm-dd>``) that ended before
    ``cutoff_s``: a day is kept while any part of it is younger. The file sink's folders, or an
    object store's objects; how many records files or objects went."""
    from runtrail.capture.file_sink import JsonlFileSink
    from runtrail.capture.object_sink import ObjectStoreSink

    if isinstance(sink, JsonlFileSink):
        return prune_capture_days(sink.root, cutoff_s)
    if isinstance(sink, ObjectStoreSink):
        return prune_capture_objects(sink.store, cutoff_s)
    raise ValueError(f"retention does not apply to a {type(sink).__name__}")


def prune_capture_days(root: Path, cutoff_s: float) -> int:
    """The file sink's part of :func:`prune_capture`, by its root folder."""
    cutoff_day = _day_of(cutoff_s)
    count = 0
    if not root.is_dir():
        return 0
    for tenant in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for day in sorted(p for p in tenant.iterdir() if p.is_dir()):
            when = _parse_day(day.name)
            if when is not None and when < cutoff_day:
                count += sum(1 for p in day.rglob("*") if p.is_file())
                shutil.rmtree(day)
    return count


def prune_capture_objects(store: Any, cutoff_s: float) -> int:
    """The object store's part of :func:`prune_capture` (keys ``<tenant>/<day>/…``)."""
    import obstore  # the s3 extra

    cutoff_day = _day_of(cutoff_s)
    doomed = [key for key in _object_keys(store) if _key_day_before(key, cutoff_day)]
    for start in range(0, len(doomed), 1000):
        obstore.delete(store, doomed[start : start + 1000])
    return len(doomed)


def prune_checkpoints(saver: RuntrailCheckpointSaver, keep: int) -> int:
    """Keep the latest ``keep`` checkpoints of every thread (per namespace) of the saver's
    tenant, with LangGraph's own prune semantics; how many threads were pruned."""
    threads = saver.backend.threads(saver.tenant_id)
    saver.prune(threads, keep=keep)
    return len(threads)


def prune_every_tenants_checkpoints(backend: CheckpointBackend, keep: int) -> int:
    """:func:`prune_checkpoints` for every tenant of the store (a service spans them all);
    how many threads were pruned."""
    from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver

    return sum(
        prune_checkpoints(RuntrailCheckpointSaver(backend, tenant_id=tenant), keep)
        for tenant in backend.tenants()
    )


def _object_keys(store: Any) -> Iterable[str]:
    import obstore

    for page in obstore.list(store):
        for meta in page:
            yield str(meta["path"])


def _key_day_before(key: str, cutoff_day: date) -> bool:
    parts = key.split("/")
    when = _parse_day(parts[1]) if len(parts) >= 3 else None
    return when is not None and when < cutoff_day


def _day_of(epoch_s: float) -> date:
    return datetime.fromtimestamp(epoch_s, UTC).date()


def _parse_day(name: str) -> date | None:
    """The day a folder or key segment names; None if it names none (not ours to judge)."""
    try:
        return datetime.strptime(name, "%Y-%m-%d").date()
    except ValueError:
        return None
