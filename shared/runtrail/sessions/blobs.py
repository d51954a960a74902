"""Large snapshots by reference: an object per snapshot, named by its digest.

A snapshot too large to carry inline on the sessions topic (Kafka messages are meant to be
small) is put in object storage at ``<tenant>/<session>/<sha256>.json`` under the blob URL's
prefix, and the topic carries its reference and digest instead. The key is the content
digest, so uploading the same snapshot again (after a crash) rewrites the same object, and a
reader checks the digest of what it fetched. Any obstore URL works: ``s3://bucket/prefix?…``
(options in the query, as for the capture sink), or ``file:///dir``. A ``file://`` folder (the
default) is written directly (atomic 0600 files), so the sessions service needs obstore (the
``s3`` extra) only for an object store. A session's blobs share the prefix ``<tenant>/<session>/``,
so erasing a session deletes one prefix; retention deletes the blobs older than its limit
(:mod:`runtrail.privacy.retention`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runtrail.extras import require
from runtrail.files import private_dir, write_atomic
from runtrail.persistence.url_options import split_options
from runtrail.persistence.urls import file_path
from runtrail.privacy.content_store import StoredObject
from runtrail.sessions.errors import CorruptSnapshot, SessionStoreError
from runtrail.sessions.naming import segment
from runtrail.sessions.snapshot import DIGEST_PREFIX, AgentSessionSnapshot, parse_snapshot


class SnapshotBlobStore:
    """Puts and gets whole snapshots in object storage, addressed by digest."""

    def __init__(self, url: str) -> None:
        base, options = split_options(url)
        self.base = base.rstrip("/")  # no query: references carry no credentials
        self._root: Path | None = None
        self._store: Any = None
        if urlsplit(base).scheme.lower() == "file":
            self._root = private_dir(file_path(base))
        else:
            require("obstore", f"session snapshot blobs at {urlsplit(base).scheme}://")
            from runtrail.persistence.object_store import open_object_store

            self._store = open_object_store(base, options)

    def _put(self, key: str, data: bytes) -> None:
        if self._root is None:
            import obstore

            obstore.put(self._store, key, data)
            return
        path = self._root / key
        private_dir(path.parent)
        write_atomic(path, data)

    def _get(self, key: str) -> bytes:
        if self._root is None:
            import obstore

            return bytes(obstore.get(self._store, key).bytes())
        return (self._root / key).read_bytes()

    def key_of(self, snapshot: AgentSessionSnapshot) -> str:
        digest = snapshot.digest.removeprefix(DIGEST_PREFIX)
        return f"{session_prefix(snapshot.tenant_id, snapshot.session_id)}{digest}.json"

    def objects(self, prefix: str = "") -> Iterator[StoredObject]:
        """Every blob under ``prefix`` (a key prefix ending in ``/``), with its write time."""
        if self._root is None:
            import obstore

            for page in obstore.list(self._store, prefix=prefix or None):
                for meta in page:
                    modified = meta["last_modified"].timestamp()
                    yield StoredObject(str(meta["path"]), int(meta["size"]), modified)
            return
        folder = self._root / prefix
        if not folder.is_dir():
            return
        for path in sorted(folder.rglob("*.json")):
            if path.is_file() and not path.name.startswith("."):  # not a writer's temporary
                stat = path.stat()
                key = path.relative_to(self._root).as_posix()
                yield StoredObject(key, stat.st_size, stat.st_mtime)

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete these blobs (absent ones are ignored); how many were there."""
        doomed = list(keys)
        if self._root is None:
            import obstore

            for start in range(0, len(doomed), 1000):
                obstore.delete(self._store, doomed[start : start + 1000])
            return len(doomed)
        count = 0
        for key in doomed:
            try:
                (self._root / key).unlink()
                count += 1
            except FileNotFoundError:
                pass
        return count

    def delete_session(self, tenant: str, session: str) -> int:
        """Delete every blob of one session (an erasure); how many. An emptied folder goes
        too: its name is the session's ID."""
        prefix = session_prefix(tenant, session)
        count = self.delete_many(o.key for o in self.objects(prefix))
        if self._root is not None:
            with contextlib.suppress(OSError):  # not there, or a save put a blob meanwhile
                (self._root / prefix).rmdir()
        return count

    def put(self, snapshot: AgentSessionSnapshot, data: bytes | None = None) -> str:
        """Upload the snapshot (its stored bytes); returns its reference (a URL)."""
        key = self.key_of(snapshot)
        try:
            self._put(key, data if data is not None else snapshot.to_bytes())
        except Exception as exc:  # obstore raises its own hierarchy
            raise SessionStoreError(f"cannot upload snapshot to {self.base}/{key}: {exc}") from exc
        return f"{self.base}/{key}"

    def read(self, reference: str) -> bytes | None:
        """The stored bytes a reference names, unverified (an erasure searches them); None if
        there is no such blob (deleted, pruned)."""
        prefix = self.base + "/"
        if not reference.startswith(prefix):
            raise SessionStoreError(f"reference {reference} is not under {self.base}")
        try:
            return self._get(reference[len(prefix) :])
        except FileNotFoundError:  # obstore raises it too for a missing object
            return None
        except Exception as exc:
            raise SessionStoreError(f"cannot fetch snapshot {reference}: {exc}") from exc

    def get(self, reference: str, digest: str) -> AgentSessionSnapshot:
        """Fetch a referenced snapshot and verify it is the one ``digest`` names."""
        data = self.read(reference)
        if data is None:
            raise SessionStoreError(f"cannot fetch snapshot {reference}: no such blob")
        snapshot = parse_snapshot(data, reference)
        if snapshot.digest != digest:
            raise CorruptSnapshot(reference, f"is {snapshot.digest}, the reference says {digest}")
        return snapshot


def session_prefix(tenant: str, session: str) -> str:
    """The key prefix of one session's blobs."""
    return f"{segment(tenant)}/{segment(session)}/"
