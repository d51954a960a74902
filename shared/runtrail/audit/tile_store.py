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

from runtrail.files import fsync_dir, write_atomic
from runtrail.persistence.urls import file_path

#: Public objects: whoever serves the folder must be able to read them.
PUBLIC_FILE_MODE = 0o644
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
    """``file:///srv/tlog``: the objects as files under one folder (each written atomically)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @classmethod
    def from_url(cls, url: str) -> FileTileStore:
        return cls(file_path(url))

    def _file(self, path: str) -> Path:
        parts = path.split("/")
        if not path or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"not a log object path: {path!r}")
        return self.root.joinpath(*parts)

    def put(self, path: str, data: bytes) -> None:
        target = self._file(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, data)
        target.chmod(PUBLIC_FILE_MODE)

    def put_all(self, objects: Iterable[tuple[str, bytes]]) -> None:
        """Each object replaced by rename, then all fsynced at once (in threads, so the disk
        commits them together) and their folders after them: one fsync round for thousands
        of tiles, not two fsyncs in turn for each."""
        written: list[Path] = []
        for path, data in objects:
            target = self._file(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            tmp.write_bytes(data)
            tmp.chmod(PUBLIC_FILE_MODE)
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
