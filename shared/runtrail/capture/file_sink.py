"""Append-only JSONL files on local disk: ``<dir>/<tenant>/<yyyy-mm-dd>/capture-<n>.jsonl``.

One record a line, placed by the record's capture date (UTC), so reprocessing puts a record
where it was put before. Files roll by size and by age; every file is created new (``O_EXCL``)
and held under an exclusive ``flock`` while written, so several capture processes can share a
directory without ever appending to the same file. ``flush`` writes the buffers and fsyncs the
files (and the directories of new files): after it returns, the offsets may be committed.
Opening the sink repairs partial last lines left by a crash (see :mod:`.repair`).

A full or read-only disk is not a crash: ``write`` keeps every record buffered, ``flush``
raises :class:`~runtrail.runtime.unavailable.StoreUnavailable` (the runtime reports not ready
and commits nothing), and the next flush continues exactly where the disk stopped — the
partial line it left is completed, never doubled. Folders are created 0700, files 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runtrail.capture.layout import partition_dir
from runtrail.capture.record import NodeIoRecord
from runtrail.capture.repair import FILE_RE, repair_tree
from runtrail.files import PRIVATE_FILE_MODE, fsync_dir, private_dir
from runtrail.persistence.url_options import (
    as_bool,
    pop_float,
    pop_int,
    reject_unknown,
    split_options,
)
from runtrail.persistence.urls import file_path
from runtrail.runtime.unavailable import StoreUnavailable

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_S = 3600.0
DEFAULT_MAX_OPEN = 32
DEFAULT_BUFFER_BYTES = 1024 * 1024


class _OpenFile:
    """A capture file this sink appends to, with the bytes not yet handed to the kernel."""

    __slots__ = ("fd", "opened_at", "path", "pending", "pending_bytes", "size", "unsynced")

    def __init__(self, fd: int, path: Path, opened_at: float) -> None:
        self.fd = fd
        self.path = path
        self.opened_at = opened_at
        self.size = 0
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.unsynced = False

    def drain(self) -> None:
        """Write the pending bytes (all of them, despite short writes).

        On an error (disk full, read-only) what was written stays written and only the rest
        stays pending, so a retry continues the line where it stopped: nothing is doubled,
        and the file's partial last line is completed rather than left behind.
        """
        if not self.pending:
            return
        data = b"".join(self.pending) if len(self.pending) > 1 else self.pending[0]
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                done += os.write(self.fd, view[done:])
        finally:
            if done:
                self.size += done
                self.unsynced = True
            if done == len(data):
                self.pending.clear()
                self.pending_bytes = 0
            else:
                self.pending[:] = [data[done:]]
                self.pending_bytes = len(data) - done

    def sync(self) -> None:
        self.drain()
        if self.unsynced:
            os.fsync(self.fd)
            self.unsynced = False


class JsonlFileSink:
    """The ``file:///dir`` sink."""

    def __init__(
        self,
        root: Path | str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        max_open: int = DEFAULT_MAX_OPEN,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        repair: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes < 1 or max_open < 1:
            raise ValueError("max_bytes and max_open must be positive")
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.max_open = max_open
        self.buffer_bytes = buffer_bytes
        self._clock = clock
        self._files: OrderedDict[tuple[str, str], _OpenFile] = OrderedDict()
        self._dirs_to_sync: set[Path] = set()
        #: records the disk refused to take a file for yet, in write order
        self._backlog: deque[tuple[tuple[str, str], bytes]] = deque()
        #: how many times the disk refused a write (for logs and tests)
        self.errors = 0
        self._closed = False
        private_dir(self.root)
        #: Files cut back to their last complete line when the sink opened.
        self.repaired: list[Path] = repair_tree(self.root) if repair else []

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> JsonlFileSink:
        """``file:///dir?max_bytes=…&max_age_s=…&max_open=…&buffer_bytes=…&repair=…``."""
        base, options = split_options(url, overrides)
        sink = cls(
            file_path(base),
            max_bytes=pop_int(options, "max_bytes", DEFAULT_MAX_BYTES),
            max_age_s=pop_float(options, "max_age_s", DEFAULT_MAX_AGE_S),
            max_open=pop_int(options, "max_open", DEFAULT_MAX_OPEN),
            buffer_bytes=pop_int(options, "buffer_bytes", DEFAULT_BUFFER_BYTES),
            repair=as_bool(options.pop("repair", True)),
        )
        reject_unknown(options, "file sink")
        return sink

    # --- CaptureSink ------------------------------------------------------------------------
    def write(self, records: Sequence[NodeIoRecord]) -> None:
        """Buffer ``records``; never raises for a full or read-only disk (``flush`` does)."""
        if self._closed:
            raise ValueError("sink is closed")
        if self._backlog:  # the disk refused earlier: queue behind what waits, in order
            self._backlog.extend((partition_dir(r), r.to_json_line()) for r in records)
            return
        for index, record in enumerate(records):
            line = record.to_json_line()
            try:
                self._place(partition_dir(record), line)
            except OSError as exc:
                self._refused(exc)
                self._backlog.extend((partition_dir(r), r.to_json_line()) for r in records[index:])
                return

    def _place(self, key: tuple[str, str], line: bytes) -> None:
        """Append ``line`` to its file's buffer; if this raises, the line is not placed."""
        target = self._target(key, len(line))
        target.pending.append(line)
        target.pending_bytes += len(line)
        if target.pending_bytes >= self.buffer_bytes:
            with contextlib.suppress(OSError):  # placed (pending in its file): flush reports it
                target.drain()

    def _refused(self, exc: OSError) -> None:
        self.errors += 1

    def flush(self) -> None:
        """Write and fsync everything; then roll files that have grown too old.

        :class:`StoreUnavailable` when the disk refuses (full, read-only, I/O error): every
        record stays buffered, in order, and the next flush continues where this one stopped.
        """
        try:
            while self._backlog:
                key, line = self._backlog[0]
                self._place(key, line)
                self._backlog.popleft()
            for open_file in self._files.values():
                open_file.sync()
            for directory in sorted(self._dirs_to_sync):
                fsync_dir(directory)
            self._dirs_to_sync.clear()
            now = self._clock()
            for key, open_file in list(self._files.items()):
                if now - open_file.opened_at >= self.max_age_s:
                    self._retire(key, open_file)
        except OSError as exc:
            self._refused(exc)
            raise StoreUnavailable(f"capture sink file://{self.root}", str(exc)) from exc

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        for key, open_file in list(self._files.items()):
            self._retire(key, open_file)
        self._closed = True

    # --- files ------------------------------------------------------------------------------
    def open_paths(self) -> list[Path]:
        """The files currently being appended to."""
        return [f.path for f in self._files.values()]

    def _target(self, key: tuple[str, str], length: int) -> _OpenFile:
        current = self._files.get(key)
        if current is not None:
            used = current.size + current.pending_bytes
            too_big = used > 0 and used + length > self.max_bytes
            if too_big or self._clock() - current.opened_at >= self.max_age_s:
                self._retire(key, current)
                current = None
            else:
                self._files.move_to_end(key)
                return current
        while len(self._files) >= self.max_open:
            old_key, old = next(iter(self._files.items()))
            self._retire(old_key, old)
        current = self._files[key] = self._create(self.root / key[0] / key[1])
        return current

    def _create(self, day: Path) -> _OpenFile:
        if not day.is_dir():
            for directory in (day.parent, day):
                if not directory.is_dir():
                    private_dir(directory)
                    self._dirs_to_sync.add(directory.parent)
        numbers = [int(m.group(1)) for name in os.listdir(day) if (m := FILE_RE.match(name))]
        number = max(numbers, default=-1) + 1
        while True:
            path = day / f"capture-{number}.jsonl"
            try:
                fd = os.open(
                    path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, PRIVATE_FILE_MODE
                )
            except FileExistsError:
                number += 1
                continue
            break
        os.fchmod(fd, PRIVATE_FILE_MODE)  # whatever the umask
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._dirs_to_sync.add(day)
        return _OpenFile(fd, path, self._clock())

    def _retire(self, key: tuple[str, str], open_file: _OpenFile) -> None:
        """Roll: make the file durable, close it (dropping its lock) and forget it."""
        open_file.sync()
        os.close(open_file.fd)
        del self._files[key]
