"""Content in a folder (``file:///var/lib/runtrail/content``): one 0600 file per object."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtrail.files import private_dir, write_atomic
from runtrail.persistence.url_options import reject_unknown, split_options
from runtrail.persistence.urls import file_path
from runtrail.privacy.content_store import DEFAULT_NAME, StoredObject


class FileContentStore:
    def __init__(self, root: Path, name: str = DEFAULT_NAME) -> None:
        self.root = private_dir(root)
        self.name = name

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> FileContentStore:
        base, options = split_options(url, overrides)
        name = str(options.pop("name", DEFAULT_NAME))
        reject_unknown(options, "content store")
        return cls(file_path(base), name)

    def _path(self, key: str) -> Path:
        if ".." in key.split("/"):
            raise ValueError(f"not a content key: {key!r}")
        return self.root / key

    def put(self, key: str, blob: bytes) -> None:
        path = self._path(key)
        private_dir(path.parent)
        write_atomic(path, blob, sync_dir=False)

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> int:
        folder = self._path(prefix.rstrip("/"))
        if not folder.is_dir():
            return 0
        count = sum(1 for p in folder.rglob("*") if p.is_file())
        shutil.rmtree(folder)
        return count

    def objects(self, prefix: str = "") -> Iterator[StoredObject]:
        for path in sorted(self.root.rglob("*")):
            key = path.relative_to(self.root).as_posix()
            if path.is_file() and key.startswith(prefix):
                stat = path.stat()
                yield StoredObject(key, stat.st_size, stat.st_mtime)

    def close(self) -> None:
        pass
