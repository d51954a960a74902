"""Checkpoint records as files beside the session snapshots of a ``file:///dir`` store.

Layout: ``<dir>/.threads/<tenant>/<thread>/<kind>/<namespace>/<a>/<b>+<c>.json``, each part one
safe segment (:func:`runtrail.sessions.naming.segment`). The folder is hidden so the session
store, which lists ``<dir>/<tenant>/<session>.json``, never mistakes it for a tenant. Each record
is written like a session snapshot (temporary file, fsync, rename, fsync of the folder), so a
reader sees the old record or the new one; writers of one thread hold an exclusive ``flock`` on
the thread's lock file, so "keep what is stored" checks and deletes are one step between
processes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from runtrail.files import exclusive_lock, fsync_dir, private_dir, write_atomic
from runtrail.persistence.urls import file_path
from runtrail.sessions.checkpoints import CheckpointBackend, Key, Prefix, Row, open_record
from runtrail.sessions.errors import SessionStoreError
from runtrail.sessions.naming import from_segment, is_hashed, segment

FOLDER = ".threads"
SUFFIX = ".json"
LOCK = ".lock"


def _seg(part: str) -> str:
    """One path segment for any key part, the empty one included (never hidden, never empty)."""
    return segment("=" + part)


def _make_dirs(path: Path, stop: Path) -> None:
    """Create ``path`` and its missing parents up to ``stop`` (0700), each entry made durable."""
    missing: list[Path] = []
    current = path
    while not current.exists() and current != stop:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        private_dir(folder)
        fsync_dir(folder.parent)


class FileCheckpointBackend(CheckpointBackend):
    """Sealed checkpoint records as JSON files under ``<root>/.threads``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().absolute()
        private_dir(self.root)
        self.base = self.root / FOLDER
        private_dir(self.base)

    @classmethod
    def from_url(cls, url: str) -> FileCheckpointBackend:
        return cls(file_path(url))

    def describe(self) -> str:
        return self.base.as_uri()

    # --- paths --------------------------------------------------------------------------------
    def thread_dir(self, tenant: str, thread: str) -> Path:
        return self.base / segment(tenant) / segment(thread)

    def locate(self, key: Key) -> str:
        return str(self.path_of(key))

    def path_of(self, key: Key) -> Path:
        tenant, thread, kind, ns, a, b, c = key
        folder = self.thread_dir(tenant, thread) / kind / _seg(ns) / _seg(a)
        return folder / f"{_seg(b)}+{_seg(c)}{SUFFIX}"

    @contextlib.contextmanager
    def _locked(self, tenant: str, thread: str) -> Iterator[Path]:
        folder = self.thread_dir(tenant, thread)
        _make_dirs(folder, self.base)
        with exclusive_lock(folder / LOCK):
            yield folder

    # --- writing ------------------------------------------------------------------------------
    def put(self, rows: Sequence[Row]) -> None:
        by_thread: dict[tuple[str, str], list[Row]] = {}
        for row in rows:
            by_thread.setdefault((row.key[0], row.key[1]), []).append(row)
        for (tenant, thread), share in by_thread.items():
            with self._locked(tenant, thread) as folder:
                pending: set[Path] = set()  # folders whose new entries are not yet durable
                for index, row in enumerate(share):
                    path = self.path_of(row.key)
                    if not row.replace and path.exists():
                        continue
                    _make_dirs(path.parent, folder)
                    if index == len(share) - 1:  # the row that makes the others reachable:
                        for parent in pending:  # only after they are durable
                            fsync_dir(parent)
                        pending.clear()
                    write_atomic(path, row.data, sync_dir=False)
                    pending.add(path.parent)
                for parent in pending:
                    fsync_dir(parent)

    def delete(self, keys: Sequence[Key]) -> None:
        by_thread: dict[tuple[str, str], list[Key]] = {}
        for key in keys:
            by_thread.setdefault((key[0], key[1]), []).append(key)
        for (tenant, thread), share in by_thread.items():
            if not self.thread_dir(tenant, thread).exists():
                continue
            with self._locked(tenant, thread):
                touched: set[Path] = set()
                for key in share:
                    path = self.path_of(key)
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                        touched.add(path.parent)
                for folder in touched:
                    fsync_dir(folder)

    def delete_thread(self, tenant: str, thread: str) -> None:
        folder = self.thread_dir(tenant, thread)
        if not folder.exists():
            return
        with self._locked(tenant, thread):
            # Rename first (atomic), so a reader never sees half a thread; then remove.
            doomed = folder.parent / f".{folder.name}.{secrets.token_hex(4)}.deleted"
            os.replace(folder, doomed)
            fsync_dir(folder.parent)
        shutil.rmtree(doomed, ignore_errors=True)

    # --- reading ------------------------------------------------------------------------------
    def get(self, key: Key) -> tuple[str, bytes] | None:
        path = self.path_of(key)
        try:
            return str(path), path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SessionStoreError(f"cannot read checkpoint record {path}: {exc}") from exc

    def newest(self, tenant: str, kind: str, thread: str, ns: str) -> str | None:
        space = self.thread_dir(tenant, thread) / kind / _seg(ns)
        named: list[tuple[str, Path]] = []
        for folder in _visible(space):
            if is_hashed(folder.name):  # a very long ID: only the record knows it
                part = self._first_part(folder)
                if part is not None:
                    named.append((part, folder))
            else:
                named.append((from_segment(folder.name)[1:], folder))  # drop _seg's "="
        # Newest first; a folder a delete emptied holds no record and is passed over.
        for part, folder in sorted(named, reverse=True):
            if any(p.name.endswith(SUFFIX) for p in _visible(folder)):
                return part
        return None

    @staticmethod
    def _first_part(folder: Path) -> str | None:
        for path in _visible(folder):
            if path.name.endswith(SUFFIX):
                key = open_record(path.read_bytes(), str(path))[0]
                return key[4]
        return None

    def scan(self, prefix: Prefix) -> list[tuple[str, bytes]]:
        tenant, kind, thread, ns, a = prefix
        tenant_dir = self.base / segment(tenant)
        threads = [self.thread_dir(tenant, thread)] if thread is not None else _visible(tenant_dir)
        found: list[tuple[str, bytes]] = []
        for thread_dir in threads:
            kind_dir = thread_dir / kind
            spaces = [kind_dir / _seg(ns)] if ns is not None else _visible(kind_dir)
            for space in spaces:
                parts = [space / _seg(a)] if a is not None else _visible(space)
                for part in parts:
                    for path in _visible(part):
                        if not path.name.endswith(SUFFIX):
                            continue
                        try:
                            found.append((str(path), path.read_bytes()))
                        except FileNotFoundError:  # deleted while scanning
                            continue
        return found

    def threads(self, tenant: str) -> list[str]:
        """Thread IDs from folder names; a long ID (a digest segment) from one of its records.
        Only names: whatever is then read from a thread is verified as usual."""
        return _ids_of_folders(self.base / segment(tenant), 1)

    def tenants(self) -> list[str]:
        """Tenant IDs from folder names; a long ID (a digest segment) from one of its records."""
        return _ids_of_folders(self.base, 0)


def _visible(folder: Path) -> list[Path]:
    """The entries of ``folder`` that are not hidden (temporary files, locks), sorted."""
    try:
        return sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _ids_of_folders(parent: Path, part: int) -> list[str]:
    """The IDs the folders under ``parent`` are named for, sorted: a plain one from its name, a
    long one (a digest segment) from the ``part``-th key part of the first record below it."""
    ids: set[str] = set()
    for folder in _visible(parent):
        if not is_hashed(folder.name):
            ids.add(from_segment(folder.name))
            continue
        for path in sorted(folder.rglob("*" + SUFFIX)):
            if not path.name.startswith("."):
                ids.add(open_record(path.read_bytes(), str(path))[0][part])
                break
    return sorted(ids)
