"""The file session store: ``<dir>/<tenant>/<session>.json``, one snapshot per file.

Filesystem only, no other dependency. A save never leaves a broken file behind, whenever the
writer dies: the snapshot is written to the session's hidden spare file in the same folder,
fsynced, and swapped with the stored file in one step (``renameat2(RENAME_EXCHANGE)``; a
rename where that is not possible), and the folder is fsynced so the swap itself survives a
power cut. A reader therefore sees the old snapshot or the new one. Writers of one session
take an exclusive ``flock`` on one of the folder's hidden lock files (``.lock-NN``, chosen by
the session's file name: at most :data:`LOCK_STRIPES` a folder, shared by its sessions), so
the newest-wins check and the swap happen as one step between processes. The spare
(``.<session>.json.spare``) holds the snapshot last replaced, or a killed writer's partial one;
nothing reads it, the next save overwrites it, and deleting the session deletes it too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson

from runtrail.files import exclusive_lock, fsync_dir, private_dir, replace_via_spare
from runtrail.persistence.urls import file_path
from runtrail.sessions.errors import CorruptSnapshot, SessionStoreError
from runtrail.sessions.naming import from_segment, is_hashed, segment
from runtrail.sessions.snapshot import AgentSessionSnapshot, parse_snapshot, verified_digest
from runtrail.sessions.store import (
    AgentSessionStore,
    SaveOutcome,
    SessionIds,
    SessionSummary,
    Summaries,
    refuses_one_snapshot,
)

log = logging.getLogger(__name__)

SUFFIX = ".json"
#: Saves of one :meth:`FileSessionStore.save_all_if` in flight at once: each waits mostly on
#: its file's fsync, and fsyncs in flight together cost little more than one.
SAVE_THREADS = 4
#: Lock files a folder holds at most: a session locks the one its file name hashes to. (One
#: per session was one more file created for each new session, and never deleted.)
LOCK_STRIPES = 64
#: Digest of a stored file that cannot be read: it never equals an expected digest.
UNREADABLE = "unreadable"
#: Reads of a snapshot tried again, at most, when a failed one finds the file changed
#: (see :func:`_settled`).
REREADS = 3

T = TypeVar("T")


class FileSessionStore(AgentSessionStore):
    """Session snapshots as JSON files under ``root``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().absolute()
        private_dir(self.root)
        #: the thread inside :meth:`durable_on_exit` (saves of other threads are not deferred)
        self._deferred_by: int | None = None
        #: folders holding renames not yet fsynced (see :meth:`durable_on_exit`)
        self._unsynced: set[Path] = set()
        self._unsynced_lock = threading.Lock()
        #: the threads of :meth:`save_all_if`, started on its first call
        self._savers: ThreadPoolExecutor | None = None

    @classmethod
    def from_url(cls, url: str) -> FileSessionStore:
        return cls(file_path(url))

    def describe(self) -> str:
        return self.root.as_uri()

    def path_of(self, tenant_id: str, session_id: str) -> Path:
        """Where a session's snapshot lives."""
        return self.root / segment(tenant_id) / (segment(session_id) + SUFFIX)

    # --- writing ------------------------------------------------------------------------------
    def save(self, snapshot: AgentSessionSnapshot) -> bool:
        path = self.path_of(snapshot.tenant_id, snapshot.session_id)
        with self._locked(path):
            stored = self._peek(path)
            if stored is not None and stored[0] > snapshot.revision:
                return False
            if stored is not None and stored[1] == UNREADABLE:
                log.warning("sessions: replacing the unreadable snapshot %s", path)
            self._write(path, snapshot.to_bytes(), self._deferred_by == threading.get_ident())
        return True

    def save_if(self, snapshot: AgentSessionSnapshot, expected_digest: str | None) -> bool:
        return self._save_if(snapshot, expected_digest, self._deferred_by == threading.get_ident())

    def save_all_if(
        self, items: Iterable[tuple[AgentSessionSnapshot, str | None]]
    ) -> list[SaveOutcome]:
        """Up to :data:`SAVE_THREADS` saves in flight, each fsyncing its own file; their folders
        are fsynced once each at the end (or, inside :meth:`durable_on_exit`, on its exit)."""
        if self._savers is None:
            self._savers = ThreadPoolExecutor(SAVE_THREADS, thread_name_prefix="runtrail-sessions")
        outer = self._deferred_by == threading.get_ident()
        pending: list[Future[bool]] = []
        failed = threading.Event()

        def note(future: Future[bool]) -> None:
            if _stops(future):
                failed.set()

        taking = iter(items)
        try:
            while not failed.is_set():  # once the store failed a write, take no more
                item = next(taking, None)
                if item is None:
                    break
                snapshot, expected = item
                future = self._savers.submit(self._save_if, snapshot, expected, True)
                future.add_done_callback(note)
                pending.append(future)
        finally:
            outcomes = [_outcome(f) for f in pending]  # waits for every save in flight
        if not outer:
            self._sync_folders()
        return outcomes

    def _save_if(
        self, snapshot: AgentSessionSnapshot, expected_digest: str | None, deferred: bool
    ) -> bool:
        path = self.path_of(snapshot.tenant_id, snapshot.session_id)
        with self._locked(path):
            try:
                data: bytes | None = path.read_bytes()
            except FileNotFoundError:
                data = None
            # the stored CONTENT is checked, not only its digest field: an edited file raises
            # CorruptSnapshot here and stays as it is (the evidence is not overwritten)
            stored = verified_digest(data, str(path)) if data is not None else None
            if stored != expected_digest:
                return False
            self._write(path, snapshot.to_bytes(), deferred)
        return True

    def _write(self, path: Path, data: bytes, deferred: bool) -> None:
        replace_via_spare(path, data, _spare(path), sync_dir=not deferred)
        if deferred:
            with self._unsynced_lock:
                self._unsynced.add(path.parent)

    @contextlib.contextmanager
    def durable_on_exit(self) -> Iterator[None]:
        """Each save inside fsyncs its file; the folders holding the renames are fsynced once
        each, on the way out (a batch of saves in one tenant's folder: one folder fsync, not
        one per save). A folder whose fsync fails stays due: the error goes to the caller
        (whose saves are then not durable) and the next exit tries it again."""
        # nested: the outer one syncs; another thread's saves are not deferred at all
        if self._deferred_by is not None:
            yield
            return
        self._deferred_by = threading.get_ident()
        try:
            yield
        finally:
            self._deferred_by = None
        self._sync_folders()

    def _sync_folders(self) -> None:
        with self._unsynced_lock:
            due = sorted(self._unsynced)
        for folder in due:
            fsync_dir(folder)  # if this raises, this folder and those after it stay due
            with self._unsynced_lock:
                self._unsynced.discard(folder)

    def close(self) -> None:
        if self._savers is not None:
            self._savers.shutdown(wait=True)
            self._savers = None

    def delete(self, tenant_id: str, session_id: str) -> bool:
        path = self.path_of(tenant_id, session_id)
        if not path.parent.exists():
            return False
        with self._locked(path):
            with contextlib.suppress(FileNotFoundError):
                _spare(path).unlink()  # it holds an older snapshot of the session
            with contextlib.suppress(FileNotFoundError):
                _own_lock(path).unlink()  # a lock file of this session alone (earlier layout)
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            finally:
                fsync_dir(path.parent)
        return True

    def sessions_holding(
        self, tenant_id: str, runs: Collection[str], text: str | None = None
    ) -> SessionIds:
        folder = self.root / segment(tenant_id)
        if not folder.is_dir():
            return []
        needle = text.encode() if text else None
        found: SessionIds = []
        for path in folder.iterdir():
            if path.name.startswith(".") or not path.name.endswith(SUFFIX):
                continue
            try:
                data, session_id, applied = _settled(path, _searched)
            except FileNotFoundError:  # deleted meanwhile
                continue
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
                log.warning("sessions: cannot read %s (%s); not searched", path, exc)
                continue
            if (needle is not None and needle in data) or any(run in applied for run in runs):
                found.append(session_id)
        return sorted(found)

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        folder = path.parent
        if not folder.exists():
            private_dir(folder)
            fsync_dir(folder.parent)  # the new tenant folder's entry must survive too
        with exclusive_lock(_lock_file(path)):
            yield

    def _peek(self, path: Path) -> tuple[int, str] | None:
        """(revision, digest) of the stored file, without verifying it; None if absent."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            document = orjson.loads(data)
            return len(document["eventLog"]), str(document["digest"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return (0, UNREADABLE)

    # --- reading ------------------------------------------------------------------------------
    def load(self, tenant_id: str, session_id: str) -> AgentSessionSnapshot | None:
        path = self.path_of(tenant_id, session_id)
        try:
            snapshot = _settled(path, lambda data: parse_snapshot(data, str(path)))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SessionStoreError(f"cannot read session snapshot {path}: {exc}") from exc
        if (snapshot.tenant_id, snapshot.session_id) != (tenant_id, session_id):
            raise CorruptSnapshot(
                str(path),
                f"holds session {snapshot.tenant_id}/{snapshot.session_id}, "
                f"not {tenant_id}/{session_id}",
            )
        return snapshot

    def list(self, tenant_id: str | None = None) -> Summaries:
        if tenant_id is not None:
            folders = [self.root / segment(tenant_id)]
        else:
            folders = sorted(p for p in self.root.iterdir() if not p.name.startswith("."))
        found: Summaries = []
        for folder in folders:
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                name = path.name
                if name.startswith(".") or not name.endswith(SUFFIX):
                    continue
                summary = self._summary(folder.name, name[: -len(SUFFIX)], path)
                if summary is not None and (tenant_id is None or summary.tenant_id == tenant_id):
                    found.append(summary)
        found.sort(key=lambda s: (s.tenant_id, s.session_id))
        return found

    def _summary(self, tenant_seg: str, session_seg: str, path: Path) -> SessionSummary | None:
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:  # deleted while listing
            return None
        if is_hashed(tenant_seg) or is_hashed(session_seg):
            try:  # a long ID is only in the file (read, not verified: listing is not loading)
                document = orjson.loads(path.read_bytes())
                tenant_id, session_id = str(document["tenantId"]), str(document["sessionId"])
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
                log.warning("sessions: cannot read the IDs of %s; not listed", path)
                return None
        else:
            tenant_id, session_id = from_segment(tenant_seg), from_segment(session_seg)
        updated = datetime.fromtimestamp(mtime, UTC).isoformat(timespec="milliseconds")
        return SessionSummary(tenant_id, session_id, updated.replace("+00:00", "Z"))


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _settled(path: Path, use: Callable[[bytes], T]) -> T:
    """``use`` applied to the file's bytes, read again while a failure finds them changed.

    A reader takes no lock, so a read may overlap saves: a swap leaves the file a reader opened
    whole, but the next save rewrites that very file as its spare, so a slow read can see it
    half rewritten (refused as not JSON or by its digest). The same bytes failing twice are the
    answer; :data:`REREADS` changed reads in a row are too."""
    data = _read(path)
    for _ in range(REREADS):
        try:
            return use(data)
        except (CorruptSnapshot, orjson.JSONDecodeError, KeyError, TypeError):
            again = _read(path)
            if again == data:
                raise
            data = again
    return use(data)


def _searched(data: bytes) -> tuple[bytes, str, Any]:
    """What :meth:`FileSessionStore.sessions_holding` reads of a snapshot: its bytes, its
    session ID and its last applied sequence per run (unverified)."""
    document = orjson.loads(data)
    return data, str(document["sessionId"]), document["lastAppliedSequence"]


def _lock_file(path: Path) -> Path:
    """The lock file writers of ``path`` take: one of the folder's :data:`LOCK_STRIPES`, by a
    hash of the file's name that every process and version computes alike (CRC-32)."""
    stripe = zlib.crc32(path.name.encode()) % LOCK_STRIPES
    return path.parent / f".lock-{stripe:02d}"


def _own_lock(path: Path) -> Path:
    """A lock file of ``path`` alone, as an earlier layout made one per session."""
    return path.parent / f".{path.name}.lock"


def _spare(path: Path) -> Path:
    """The hidden file a save of ``path`` writes into before the swap: it then holds the
    snapshot replaced (see :func:`~runtrail.files.replace_via_spare`)."""
    return path.parent / f".{path.name}.spare"


def _stops(future: Future[bool]) -> bool:
    exc = future.exception()
    return isinstance(exc, Exception) and not refuses_one_snapshot(exc)


def _outcome(future: Future[bool]) -> SaveOutcome:
    exc = future.exception()  # waits
    if exc is None:
        return future.result()
    if isinstance(exc, Exception):
        return exc
    raise exc  # KeyboardInterrupt and the like are not an outcome
