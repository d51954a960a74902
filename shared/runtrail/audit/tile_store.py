"""Where the transparency log's static objects go: a folder or any object store.

C2SP tlog-tiles is a set of static objects (``checkpoint``, ``tile/<L>/<N>[.p/<W>]``,
``tile/entries/<N>[.p/<W>]``), so any file server, bucket or CDN can serve and mirror the
log. Full tiles never change; partial ones are replaced by wider ones, and ``checkpoint`` is
written after the tiles it needs, so a reader never sees a checkpoint ahead of its tiles.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from runtrail.files import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    fsync_dir,
    private_dir,
    write_atomic,
)
from runtrail.persistence.url_options import as_bool, reject_unknown, split_options
from runtrail.persistence.urls import file_path

#: Objects of a folder a web server serves as it is (``?public=true``): readable by all.
PUBLIC_FILE_MODE = 0o644
PUBLIC_DIR_MODE = 0o755
#: Files fsynced at once by :meth:`FileTileStore.put_all`.
SYNC_THREADS = 16


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TileStore(Protocol):
    """Static objects by path (``/``-separated, relative to the log's root)."""

    def put(self, path: str, data: bytes) -> None: ...

    def put_all(self, objects: Iterable[tuple[str, bytes]]) -> None:
        """Write many objects; all of them are durable when it returns."""
        ...

    def get(self, path: str) -> bytes | None:
        """The object, or None if there is none."""
        ...


class FileTileStore:
    """``file:///srv/tlog``: the objects as files under one folder (each written atomically).

    Private (0700 folders, 0600 files) like every store in the state folder: the audit API
    serves the objects to anyone. ``?public=true`` makes them readable by all, for a folder a
    web server or a mirror reads directly (the objects are hashes and signed checkpoints)."""

    def __init__(self, root: str | os.PathLike[str], *, public: bool = False) -> None:
        self.root = Path(root)
        self._file_mode = PUBLIC_FILE_MODE if public else PRIVATE_FILE_MODE
        self._dir_mode = PUBLIC_DIR_MODE if public else PRIVATE_DIR_MODE

    @classmethod
    def from_url(cls, url: str) -> FileTileStore:
        location, options = split_options(url)
        public = as_bool(options.pop("public", False))
        reject_unknown(options, "tile store")
        return cls(file_path(location), public=public)

    def _folder(self, folder: Path) -> None:
        """``folder`` and its missing parents up to the root, in this store's mode (the
        root's own missing parents private, as the state folder's are)."""
        if not self.root.exists():
            private_dir(self.root.parent)
        missing = []
        probe = folder
        while not probe.exists():
            missing.append(probe)
            if probe == self.root or probe.parent == probe:
                break
            probe = probe.parent
        for created in reversed(missing):
            created.mkdir(exist_ok=True)
            os.chmod(created, self._dir_mode)  # mkdir's mode is masked by the umask

    def _file(self, path: str) -> Path:
        parts = path.split("/")
        if not path or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"not a log object path: {path!r}")
        return self.root.joinpath(*parts)

    def put(self, path: str, data: bytes) -> None:
        target = self._file(path)
        self._folder(target.parent)
        write_atomic(target, data)
        target.chmod(self._file_mode)

    def put_all(self, objects: Iterable[tuple[str, bytes]]) -> None:
        """Each object replaced by rename, then all fsynced at once (in threads, so the disk
        commits them together) and their folders after them: one fsync round for thousands
        of tiles, not two fsyncs in turn for each."""
        written: list[Path] = []
        for path, data in objects:
            target = self._file(path)
            self._folder(target.parent)
            tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self._file_mode)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            tmp.chmod(self._file_mode)
            os.replace(tmp, target)
            written.append(target)
        with ThreadPoolExecutor(SYNC_THREADS) as pool:
            list(pool.map(_fsync_file, written))
            list(pool.map(fsync_dir, {target.parent for target in written}))

    def get(self, path: str) -> bytes | None:
        try:
            return self._file(path).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
