"""The file session store: ``<dir>/<tenant>/<session>.json``, one snapshot per file.

Filesystem only, no other dependency. A save never leaves a broken file behind, whenever the
writer dies: the snapshot is written to a new temporary file in the same folder, fsynced,
renamed over the old file (atomic on POSIX), and the folder is fsynced so the rename itself
survives a power cut. A reader therefore sees the old snapshot or the new one. Writers of one
session take an exclusive ``flock`` on a hidden lock file beside it, so the newest-wins check
and the rename happen as one step between processes. Temporary files of killed writers are
hidden (``.…tmp``) and ignored; nothing reads them.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

import orjson

from runtrail.files import private_dir
from runtrail.sessions.errors import CorruptSnapshot, SessionStoreError
from runtrail.sessions.naming import from_segment, is_hashed, segment
from runtrail.sessions.snapshot import AgentSessionSnapshot, parse_snapshot, verified_digest
from runtrail.sessions.store import AgentSessionStore, SessionSummary, Summaries

log = logging.getLogger(__name__)

SUFFIX = ".json"
#: Digest of a stored file that cannot be read: it never equals an expected digest.
UNREADABLE = "unreadable"


def file_root(url: str) -> Path:
    """The folder of a ``file:///abs/dir`` (or ``file://relative/dir``) URL."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file":
        raise ValueError(f"not a file:// URL: {url!r}")
    netloc = "" if parts.netloc in ("", "localhost") else parts.netloc
    return Path(unquote(netloc + parts.path))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSessionStore(AgentSessionStore):
    """Session snapshots as JSON files under ``root``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().absolute()
        private_dir(self.root)

    @classmethod
    def from_url(cls, url: str) -> FileSessionStore:
        return cls(file_root(url))

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
            self._write(path, snapshot.to_bytes())
        return True

    def save_if(self, snapshot: AgentSessionSnapshot, expected_digest: str | None) -> bool:
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
            self._write(path, snapshot.to_bytes())
        return True

    def delete(self, tenant_id: str, session_id: str) -> bool:
        path = self.path_of(tenant_id, session_id)
        if not path.parent.exists():
            return False
        with self._locked(path):
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            _fsync_dir(path.parent)
        return True

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        folder = path.parent
        if not folder.exists():
            private_dir(folder)
            _fsync_dir(folder.parent)  # the new tenant folder's entry must survive too
        fd = os.open(folder / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

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

    def _write(self, path: Path, data: bytes) -> None:
        tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(path.parent)

    # --- reading ------------------------------------------------------------------------------
    def load(self, tenant_id: str, session_id: str) -> AgentSessionSnapshot | None:
        path = self.path_of(tenant_id, session_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SessionStoreError(f"cannot read session snapshot {path}: {exc}") from exc
        snapshot = parse_snapshot(data, str(path))
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
