"""The JSON-lines spool file of an older publisher, read only to import one into the WAL.

The publisher now writes :mod:`runtrail.publisher.wal` (every accepted event, binary frames).
A spool file left by an older publisher is moved into the WAL of the same slot when a new
publisher opens it, so upgrading loses nothing.

One append-only file per publisher and topic, ``<spool_dir>/<tenant>/<topic>.spool`` (the
next free ``<topic>.<n>.spool`` when another live publisher holds that one; an exclusive
``flock`` marks ownership). Each record is one JSON line holding the Kafka key, value and
headers base64-encoded, so a resend is byte-identical to the first attempt.

A cursor file beside it (``.cursor``, replaced atomically) holds the byte offset of the first
record not yet acknowledged by the broker. Draining sends records from the cursor, and only
advances it past what was acknowledged; once the cursor reaches the end the cursor is reset
to 0 *before* the file is truncated, so a crash in between resends (duplicates, which
consumers drop by eventId) rather than loses. A torn last line (a crash mid-append) is cut
off when the spool is opened.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from runtrail.files import open_private, private_dir
from runtrail.publisher.spool_record import SpoolRecord, path_component

log = logging.getLogger(__name__)

#: How many ``<topic>.<n>.spool`` slots to try before giving up.
MAX_SLOTS = 64


class SpoolError(Exception):
    """The spool cannot be opened (every slot is held, or the folder is unusable)."""


@dataclass(frozen=True, slots=True)
class SpoolEntry:
    """A record read from the spool and the offset just past it (``record`` None: unreadable)."""

    record: SpoolRecord | None
    end: int


class Spool:
    """An owned spool file: append at the end, read and acknowledge from the cursor."""

    def __init__(self, path: Path) -> None:
        """Open and lock ``path``; raises ``BlockingIOError`` if another publisher holds it."""
        self.path = path
        self._cursor_path = path.with_name(path.name + ".cursor")
        private_dir(path.parent)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise
        self._dirty = False
        self._size = self._repair_tail()
        self._cursor = self._load_cursor()
        self._depth = self._count_lines(self._cursor, self._size)

    @classmethod
    def open_for(cls, spool_dir: Path, tenant: str, topic: str) -> Spool:
        """The first free spool slot of ``topic`` under ``spool_dir/<tenant>/``."""
        folder = Path(spool_dir) / path_component(tenant)
        base = path_component(topic)
        for slot in range(MAX_SLOTS):
            name = f"{base}.spool" if slot == 0 else f"{base}.{slot}.spool"
            try:
                return cls(folder / name)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise SpoolError(f"cannot open spool {folder / name}: {exc}") from exc
        raise SpoolError(f"all {MAX_SLOTS} spool slots of {topic!r} in {folder} are in use")

    # --- state ---------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Records not yet acknowledged."""
        return self._depth

    @property
    def cursor(self) -> int:
        return self._cursor

    @property
    def size(self) -> int:
        return self._size

    # --- writing -------------------------------------------------------------------------
    def append(self, record: SpoolRecord) -> None:
        """Append one record (written through to the OS; :meth:`sync` makes it durable)."""
        data = record.to_line()
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError:
            self._size = self._repair_tail()  # never leave half a line behind
            raise
        self._size += len(data)
        self._depth += 1
        self._dirty = True

    def sync(self) -> None:
        """fsync what was appended since the last sync."""
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    # --- reading and acknowledging -------------------------------------------------------
    def read(self, max_records: int, max_bytes: int = 8 << 20) -> list[SpoolEntry]:
        """Up to ``max_records`` records (about ``max_bytes``) from the cursor, in order."""
        entries: list[SpoolEntry] = []
        if self._cursor >= self._size:
            return entries
        with open(self.path, "rb") as reader:
            reader.seek(self._cursor)
            pos, taken = self._cursor, 0
            while pos < self._size and len(entries) < max_records and taken < max_bytes:
                line = reader.readline()
                if not line.endswith(b"\n"):
                    break
                pos += len(line)
                taken += len(line)
                try:
                    record: SpoolRecord | None = SpoolRecord.from_line(line)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("unreadable spool record at %s:%d: %s", self.path, pos, exc)
                    record = None
                entries.append(SpoolEntry(record, pos))
        return entries

    def advance(self, offset: int, records: int) -> None:
        """Acknowledge ``records`` records, up to byte ``offset``; an emptied spool is reset."""
        if offset <= self._cursor:
            return
        if offset > self._size:
            raise ValueError(f"cursor {offset} beyond spool end {self._size}")
        self._depth = max(0, self._depth - records)
        if offset == self._size:
            self._store_cursor(0)  # first: a crash now resends, it cannot skip
            os.ftruncate(self._fd, 0)
            self._cursor = self._size = self._depth = 0
            self._dirty = True
        else:
            self._store_cursor(offset)
            self._cursor = offset

    def close(self) -> None:
        """Sync, unlock and close; a later publisher drains what is left."""
        if self._fd < 0:
            return
        try:
            self.sync()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1

    # --- internals -----------------------------------------------------------------------
    def _repair_tail(self) -> int:
        """Cut a torn last line off; returns the size of the complete lines."""
        size = os.fstat(self._fd).st_size
        if size == 0 or os.pread(self._fd, 1, size - 1) == b"\n":
            return size
        end = size
        block = 64 << 10
        while end > 0:
            start = max(0, end - block)
            chunk = os.pread(self._fd, end - start, start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        log.warning("spool %s: cut a torn record of %d bytes", self.path, size - end)
        os.ftruncate(self._fd, end)
        return end

    def _load_cursor(self) -> int:
        try:
            cursor = int(self._cursor_path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0
        except ValueError:
            log.warning("spool cursor %s unreadable; resending from the start", self._cursor_path)
            return 0
        if cursor < 0 or cursor > self._size:
            log.warning("spool cursor %d outside %s; resending from the start", cursor, self.path)
            return 0
        if cursor > 0 and os.pread(self._fd, 1, cursor - 1) != b"\n":
            log.warning(
                "spool cursor %d not at a record boundary; resending from the start", cursor
            )
            return 0
        return cursor

    def _store_cursor(self, offset: int) -> None:
        tmp = self._cursor_path.with_name(self._cursor_path.name + ".tmp")
        with open_private(tmp, "w") as out:
            out.write(str(offset))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self._cursor_path)

    def _count_lines(self, start: int, end: int) -> int:
        count, pos, block = 0, start, 1 << 20
        while pos < end:
            chunk = os.pread(self._fd, min(block, end - pos), pos)
            if not chunk:
                break
            count += chunk.count(b"\n")
            pos += len(chunk)
        return count
