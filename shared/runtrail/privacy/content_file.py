"""Content in a folder (``file:///var/lib/runtrail/content``): one append-only segment file per
data key, ``<tenant>/<keyId>/objects.seg``, 0600.

Why segments, not a file per object: creating a file per sealed field cost more than the rest
of publishing an event (a new inode under the journal the spool fsyncs), an append to an open
segment costs a microsecond. A record is ``RTO1``, the object's digest (64 hex characters), its
length (8 bytes, big-endian) and the sealed bytes, written by one ``write`` on an ``O_APPEND``
descriptor, so writers of several processes never interleave. Readers index a segment once and
extend the index as it grows. Erasing a data key deletes its folder; retention deletes whole
segments, or rewrites one without the records it prunes.

Durable by default, in groups: ``put`` appends and notes the segment; :meth:`sync` fsyncs every
segment written since (and the folder of a new one), once for many objects. The publisher calls
it in each group commit of its spool, before the spool's own write and fsync, so an event on
disk never refers to content that is not (content an event refers to must outlive a power cut
as the event does). ``?fsync=false`` turns it off: a power cut may then lose the content of the
last events written, whose references read as erased.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from runtrail.files import fsync_dir, open_private, private_dir
from runtrail.persistence.url_options import as_bool, reject_unknown, split_options
from runtrail.persistence.urls import file_path
from runtrail.privacy.content_store import DEFAULT_NAME, StoredObject

SEGMENT = "objects.seg"
MAGIC = b"RTO1"
HEADER = len(MAGIC) + 64 + 8
#: Most segment descriptors kept open for appending (one per subject being written).
MAX_OPEN = 256


class _Index:
    """Where each object of one segment is: digest -> (offset of its bytes, length)."""

    def __init__(self, inode: int) -> None:
        self.inode = inode
        self.scanned = 0
        self.at: dict[str, tuple[int, int]] = {}


class FileContentStore:
    def __init__(self, root: Path, name: str = DEFAULT_NAME, *, fsync: bool = True) -> None:
        self.root = private_dir(root)
        self.name = name
        self._fsync = fsync
        self._lock = threading.Lock()
        self._open: OrderedDict[Path, int] = OrderedDict()
        #: segments appended to since the last sync, and folders given a new segment
        self._unsynced: set[Path] = set()
        self._new_folders: set[Path] = set()
        self._indexes: dict[Path, _Index] = {}
        self._segments: dict[str, Path] = {}  # folder of a key -> its segment (no path math)
        # a store nobody closed (a publisher's, at its end) still closes its descriptors
        weakref.finalize(self, _close_all, self._open)

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> FileContentStore:
        base, options = split_options(url, overrides)
        name = str(options.pop("name", DEFAULT_NAME))
        fsync = as_bool(options.pop("fsync", True))
        reject_unknown(options, "content store")
        return cls(file_path(base), name, fsync=fsync)

    def _split(self, key: str) -> tuple[Path, str]:
        folder, _, digest = key.rpartition("/")
        segment = self._segments.get(folder)
        if segment is None:
            if not folder or ".." in folder.split("/"):
                raise ValueError(f"not a content key: {key!r}")
            segment = self._segments.setdefault(folder, self.root / folder / SEGMENT)
        if len(digest) != 64:
            raise ValueError(f"not a content key: {key!r}")
        return segment, digest

    # --- writing ------------------------------------------------------------------------
    def put(self, key: str, blob: bytes) -> None:
        segment, digest = self._split(key)
        record = MAGIC + digest.encode() + len(blob).to_bytes(8, "big") + blob
        with self._lock:
            fd = self._open.get(segment)
            if fd is None:
                fd = self._append_fd(segment)
            else:
                self._open.move_to_end(segment)
            os.write(fd, record)
            if self._fsync:
                self._unsynced.add(segment)

    def sync(self) -> None:
        """Make every object put so far durable: one fsync per segment written since the last
        sync, and one per folder that got a new segment. The fsyncs run outside the lock (on
        duplicated descriptors), so puts go on meanwhile."""
        if not self._fsync:
            return
        with self._lock:
            segments, self._unsynced = self._unsynced, set()
            folders, self._new_folders = self._new_folders, set()
            duplicates = [os.dup(self._open[s]) for s in segments if s in self._open]
        try:
            for fd in duplicates:
                os.fdatasync(fd)  # data and size: all a reader of an append needs
            for folder in folders:
                with contextlib.suppress(FileNotFoundError):  # erased meanwhile
                    fsync_dir(folder)
        except BaseException:
            with self._lock:
                self._unsynced |= segments  # tried again at the next sync
                self._new_folders |= folders
            raise
        finally:
            for fd in duplicates:
                os.close(fd)

    def _append_fd(self, segment: Path) -> int:
        if self._fsync:  # a new entry in a folder is durable once the folder is fsynced
            probe = segment
            while probe != self.root and not probe.exists():
                self._new_folders.add(probe.parent)
                probe = probe.parent
        private_dir(segment.parent)
        fd = os.open(segment, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._open[segment] = fd
        while len(self._open) > MAX_OPEN:
            evicted, old = self._open.popitem(last=False)
            if evicted in self._unsynced:
                os.fsync(old)  # its writes must be durable by the next sync
                self._unsynced.discard(evicted)
            os.close(old)
        return fd

    def _forget(self, segment: Path) -> None:
        self._unsynced.discard(segment)
        fd = self._open.pop(segment, None)
        if fd is not None:
            os.close(fd)
        self._indexes.pop(segment, None)

    # --- reading ------------------------------------------------------------------------
    def _index(self, segment: Path) -> _Index:
        """The segment's index, extended over what was appended since (lock held)."""
        with open(segment, "rb") as data:
            stat = os.fstat(data.fileno())
            index = self._indexes.get(segment)
            if index is None or index.inode != stat.st_ino or stat.st_size < index.scanned:
                index = self._indexes[segment] = _Index(stat.st_ino)  # new, or rewritten
            data.seek(index.scanned)
            while True:
                head = data.read(HEADER)
                if len(head) < HEADER or not head.startswith(MAGIC):
                    break  # the end, or a record still being written: read again later
                length = int.from_bytes(head[-8:], "big")
                start = index.scanned + HEADER
                if data.seek(length, os.SEEK_CUR) > stat.st_size:
                    break
                index.at.setdefault(head[len(MAGIC) : len(MAGIC) + 64].decode(), (start, length))
                index.scanned = start + length
        return index

    def get(self, key: str) -> bytes | None:
        segment, digest = self._split(key)
        with self._lock:
            try:
                found = self._index(segment).at.get(digest)
            except FileNotFoundError:
                self._indexes.pop(segment, None)
                return None
        if found is None:
            return None
        try:
            with open(segment, "rb") as data:
                data.seek(found[0])
                return data.read(found[1])
        except FileNotFoundError:
            return None

    def objects(self, prefix: str = "") -> Iterator[StoredObject]:
        for segment in sorted(self.root.rglob(SEGMENT)):
            folder = segment.parent.relative_to(self.root).as_posix()
            if not (folder + "/").startswith(prefix) and not prefix.startswith(folder + "/"):
                continue
            with self._lock:
                try:
                    at = dict(self._index(segment).at)
                    modified = segment.stat().st_mtime
                except FileNotFoundError:
                    continue
            for digest, (_, length) in sorted(at.items()):
                key = f"{folder}/{digest}"
                if key.startswith(prefix):
                    yield StoredObject(key, length, modified)

    # --- deleting -----------------------------------------------------------------------
    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete objects: a segment left empty is removed, others rewritten without them."""
        doomed: dict[Path, set[str]] = {}
        for key in keys:
            segment, digest = self._split(key)
            doomed.setdefault(segment, set()).add(digest)
        count = 0
        with self._lock:
            for segment, digests in doomed.items():
                try:
                    at = dict(self._index(segment).at)
                except FileNotFoundError:
                    continue
                gone = digests & at.keys()
                count += len(gone)
                kept = [d for d in at if d not in gone]
                self._forget(segment)
                if not kept:
                    segment.unlink(missing_ok=True)
                    continue
                beside = segment.with_name(f".{SEGMENT}.{os.getpid()}")
                with open(segment, "rb") as data, open_private(beside, "wb") as out:
                    for digest in kept:
                        start, length = at[digest]
                        data.seek(start)
                        blob = data.read(length)
                        out.write(MAGIC + digest.encode() + length.to_bytes(8, "big") + blob)
                    if self._fsync:
                        out.flush()
                        os.fsync(out.fileno())
                os.replace(beside, segment)
        return count

    def delete_prefix(self, prefix: str) -> int:
        folder = self.root / prefix.rstrip("/")
        if ".." in prefix.split("/") or not folder.is_dir():
            return 0
        with self._lock:
            count = 0
            for segment in folder.rglob(SEGMENT):
                count += len(self._index(segment).at)
                self._forget(segment)
            shutil.rmtree(folder)
        return count

    def close(self) -> None:
        self.sync()
        with self._lock:
            _close_all(self._open)
            self._indexes.clear()
            self._segments.clear()


def _close_all(descriptors: OrderedDict[Path, int]) -> None:
    for fd in descriptors.values():
        os.close(fd)
    descriptors.clear()
