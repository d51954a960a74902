"""The write-ahead spool: every event ``publish()`` accepted, on disk, in publish order.

Why: an event that exists only in librdkafka's memory is lost when the agent dies. The
publisher appends every accepted event here (in batches: one write and one fsync per group
commit, never per event), sends it, and moves a *cursor* past what the broker acknowledged.
What lies beyond the cursor when a process dies is sent by the next publisher that opens the
same folder, after it has checked which of those events already reached the topic
(:mod:`runtrail.publisher.recovery`), so nothing is lost and nothing is doubled.

Layout: ``<spool_dir>/<tenant>/<topic>.wal/`` (``<topic>.<n>.wal`` when another live publisher
holds that one; an exclusive ``flock`` on ``lock`` marks ownership), all 0700/0600:

* ``<first index, 20 digits>.seg`` — segments of length-prefixed, CRC-checked frames; each
  record has a global index (its place in publish order), so a segment's name says where it
  starts. A new segment starts past ``SEGMENT_BYTES``; a segment wholly behind the cursor is
  deleted.
* ``cursor`` — ``<index> <segment> <offset>`` of the first record not known acknowledged,
  replaced atomically. It may lag (it is stored about once a second): the records between it
  and the true position are found on the topic by the recovery scan, not resent.

A torn last frame (a crash mid-write) is cut off at open. A JSON-lines spool file
(``<topic>.spool``) of the same slot is imported at open, then removed.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtrail.events.native import NATIVE
from runtrail.files import fsync_dir, private_dir
from runtrail.publisher.legacy_spool import LegacySpoolReader
from runtrail.publisher.spool_record import SpoolRecord, path_component

log = logging.getLogger(__name__)

#: How many ``<topic>.<n>.wal`` slots to try before giving up.
MAX_SLOTS = 64
#: Start a new segment once the current one is this large.
SEGMENT_BYTES = 64 << 20

_MAGIC = b"RW"
_HEAD = struct.Struct("<2sII")  # magic, body length, crc32 of the body
_BODY = struct.Struct("<qqiHHI")  # timestamp ms (-1: none), sequence (-1: none), key length
#                                   (-1: none), id length, header count, value length
_HNAME = struct.Struct("<HI")  # header name length, value length


#: the compiled frame encoder (``runtrail_native.wal_frames``), when the extension has it
_native_frames = getattr(NATIVE, "wal_frames", None)


class WalError(Exception):
    """The write-ahead spool cannot be opened or written."""


@dataclass(frozen=True, slots=True)
class WalPos:
    """A place in the log: the index of the record that starts there, and where it is."""

    index: int
    segment: int  # first index of the segment file
    offset: int  # byte offset in that file


@dataclass(frozen=True, slots=True)
class WalEntry:
    """A record read back (``record`` None: unreadable) and the position just past it."""

    index: int
    record: SpoolRecord | None
    end: WalPos


def frames(records: Sequence[SpoolRecord]) -> bytes:
    """The frames of ``records``, joined: compiled when it can be (a Python call per header
    was most of the committer's time an event), else :func:`encode` each."""
    if _native_frames is not None and type(records) is list:
        joined: bytes | None = _native_frames(records)
        if joined is not None:
            return joined
    return b"".join(encode(r) for r in records)


def encode(record: SpoolRecord) -> bytes:
    """One frame: head (magic, length, crc) and body (timestamp, sequence, key, eventId,
    headers, value)."""
    key = record.key
    event_id = (record.event_id or "").encode()
    ts = -1 if record.timestamp_ms is None else record.timestamp_ms
    parts = [
        _BODY.pack(
            ts,
            -1 if record.sequence is None else record.sequence,
            -1 if key is None else len(key),
            len(event_id),
            len(record.headers),
            len(record.value),
        ),
        key or b"",
        event_id,
    ]
    for name, value in record.headers:
        raw = name.encode()
        parts += (_HNAME.pack(len(raw), len(value)), raw, value)
    parts.append(record.value)
    body = b"".join(parts)
    return _HEAD.pack(_MAGIC, len(body), zlib.crc32(body)) + body


def decode(body: bytes | memoryview) -> SpoolRecord:
    """The record of one frame body (already CRC-checked)."""
    ts, sequence, key_len, id_len, count, value_len = _BODY.unpack_from(body, 0)
    pos = _BODY.size
    key = None if key_len < 0 else bytes(body[pos : pos + key_len])
    pos += max(key_len, 0)
    event_id = bytes(body[pos : pos + id_len]).decode() or None
    pos += id_len
    headers = []
    for _ in range(count):
        name_len, val_len = _HNAME.unpack_from(body, pos)
        pos += _HNAME.size
        name = bytes(body[pos : pos + name_len]).decode()
        pos += name_len
        headers.append((name, bytes(body[pos : pos + val_len])))
        pos += val_len
    value = bytes(body[pos : pos + value_len])
    if pos + value_len != len(body):
        raise ValueError("frame body length does not match its fields")
    return SpoolRecord(
        key,
        value,
        tuple(headers),
        event_id,
        None if ts < 0 else ts,
        None if sequence < 0 else sequence,
    )


def _segment_name(first: int) -> str:
    return f"{first:020d}.seg"


class Wal:
    """An owned write-ahead spool folder; thread-safe (appends, reads and cursor moves)."""

    def __init__(self, folder: Path) -> None:
        """Open and lock ``folder``; raises ``BlockingIOError`` if another publisher holds it."""
        self.folder = private_dir(folder)
        self._lock_fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise
        self._lock = threading.Lock()
        self._segments: list[int] = sorted(
            int(p.name[:-4]) for p in folder.glob("*.seg") if p.name[:-4].isdigit()
        )
        self._fd = -1
        self._cursor_path = folder / "cursor"
        self._end = self._recover_end()
        self._cursor = self._load_cursor()
        self._marks: deque[WalPos] = deque([self._cursor])
        self._stored_cursor = self._cursor
        #: written without an fsync: a batch every record of which the broker holds already
        self._unsynced = False
        self.unreadable = 0

    @classmethod
    def open_for(cls, spool_dir: Path, tenant: str, topic: str) -> Wal:
        """The first free slot of ``topic`` under ``spool_dir/<tenant>/``."""
        try:
            folder = private_dir(Path(spool_dir) / path_component(tenant))
        except OSError as exc:
            raise WalError(f"cannot create the spool folder under {spool_dir}: {exc}") from exc
        base = path_component(topic)
        for slot in range(MAX_SLOTS):
            name = base if slot == 0 else f"{base}.{slot}"
            try:
                wal = cls(folder / f"{name}.wal")
            except BlockingIOError:
                continue
            except OSError as exc:
                raise WalError(f"cannot open the spool {folder / name}.wal: {exc}") from exc
            wal._import_legacy(folder / f"{name}.spool")
            return wal
        raise WalError(f"all {MAX_SLOTS} spool slots of {topic!r} in {folder} are in use")

    # --- state ---------------------------------------------------------------------------
    @property
    def end(self) -> WalPos:
        return self._end

    @property
    def cursor(self) -> WalPos:
        return self._cursor

    @property
    def depth(self) -> int:
        """Records at or after the cursor (not known to be acknowledged)."""
        return self._end.index - self._cursor.index

    # --- writing (the group commit) ------------------------------------------------------
    def append(self, records: Sequence[SpoolRecord], sync: bool = True) -> None:
        """Write ``records`` in one call and fsync them: one group commit. ``sync`` False
        (records the broker acknowledged already, which need no disk to survive) skips the
        fsync; the next synced batch, cursor store or new segment makes them durable too, so
        a stored cursor never points past what is on disk."""
        if not records:
            return
        data = frames(records)
        with self._lock:
            end = self._end
            if self._fd < 0 or end.offset >= SEGMENT_BYTES:
                self._start_segment(end.index)
                end = self._end
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._fd, view) :]
                if sync:
                    os.fsync(self._fd)
            except OSError:
                os.ftruncate(self._fd, end.offset)  # never leave half a batch behind
                raise
            self._unsynced = not sync
            self._end = WalPos(end.index + len(records), end.segment, end.offset + len(data))
            self._marks.append(self._end)

    # --- reading and acknowledging -------------------------------------------------------
    def position_of(self, index: int) -> WalPos:
        """The furthest known position at or before record ``index`` (a batch boundary)."""
        with self._lock:
            best = self._cursor
            for mark in self._marks:
                if mark.index > index:
                    break
                best = mark
            return best

    def read(self, start: WalPos, max_records: int, max_bytes: int = 8 << 20) -> list[WalEntry]:
        """Up to ``max_records`` written records (about ``max_bytes``) from ``start``, in order."""
        with self._lock:
            end = self._end
            segments = list(self._segments)
        entries: list[WalEntry] = []
        pos, taken = start, 0
        while pos.index < end.index and len(entries) < max_records and taken < max_bytes:
            limit = end.offset if pos.segment == end.segment else None
            path = self.folder / _segment_name(pos.segment)
            eof = False
            with open(path, "rb") as reader:
                reader.seek(pos.offset)
                while len(entries) < max_records and taken < max_bytes:
                    if limit is not None and pos.offset >= limit:
                        eof = True
                        break
                    head = reader.read(_HEAD.size)
                    if len(head) < _HEAD.size:
                        eof = True
                        break
                    magic, length, crc = _HEAD.unpack(head)
                    body = reader.read(length) if magic == _MAGIC else b""
                    record: SpoolRecord | None = None
                    if magic == _MAGIC and len(body) == length and zlib.crc32(body) == crc:
                        try:
                            record = decode(body)
                        except (ValueError, struct.error, UnicodeDecodeError) as exc:
                            log.error("unreadable spool record %d in %s: %s", pos.index, path, exc)
                    else:
                        log.error(
                            "corrupt spool record %d in %s: skipping the segment's rest",
                            pos.index,
                            path,
                        )
                        eof = True  # lengths cannot be trusted past a corrupt head
                        break
                    pos = WalPos(pos.index + 1, pos.segment, pos.offset + _HEAD.size + length)
                    entries.append(WalEntry(pos.index - 1, record, pos))
                    taken += _HEAD.size + length
            if not eof:
                break
            later = [s for s in segments if s > pos.segment]
            if not later or limit is not None:
                break
            if later[0] != pos.index:
                log.error("spool segment %d does not start at record %d", later[0], pos.index)
            pos = WalPos(later[0], later[0], 0)
        return entries

    def advance(self, index: int) -> None:
        """Move the cursor to the furthest written batch boundary at or before ``index``."""
        self.advance_to(self.position_of(index))

    def advance_to(self, pos: WalPos) -> None:
        """Move the cursor to ``pos`` (in memory; :meth:`store_cursor` makes it durable)."""
        with self._lock:
            if pos.index <= self._cursor.index:
                return
            self._cursor = pos
            while len(self._marks) > 1 and self._marks[1].index <= pos.index:
                self._marks.popleft()
            if self._marks and self._marks[0].index < pos.index:
                self._marks[0] = pos

    @property
    def caught_up(self) -> bool:
        """The stored cursor is at the end: nothing written waits to be acknowledged or for
        the cursor to be stored."""
        with self._lock:
            return self._stored_cursor == self._end

    def store_cursor(self) -> None:
        """Persist the cursor and delete segments wholly behind it (cheap when unchanged)."""
        with self._lock:
            cursor, end = self._cursor, self._end
            if cursor == self._stored_cursor:
                return
            if cursor.index == end.index and end.offset >= SEGMENT_BYTES // 16:
                # all acknowledged: start afresh so the spent segment can go
                self._start_segment(end.index)
                cursor = self._cursor = self._end
                self._marks = deque([cursor])
            self._sync_written()
            self._write_cursor(cursor)
            self._stored_cursor = cursor
            spent = [s for s in self._segments if s < cursor.segment]
            self._segments = [s for s in self._segments if s >= cursor.segment]
        for first in spent:
            (self.folder / _segment_name(first)).unlink(missing_ok=True)

    def close(self) -> None:
        """Store the cursor, unlock and close; a later publisher sends what is left."""
        if self._lock_fd < 0:
            return
        try:
            self.store_cursor()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    # --- internals (the caller holds the lock where state changes) ------------------------
    def _sync_written(self) -> None:
        """fsync what :meth:`append` wrote without one (before anything refers past it)."""
        if self._unsynced and self._fd >= 0:
            os.fsync(self._fd)
        self._unsynced = False

    def _start_segment(self, first: int) -> None:
        if self._fd >= 0:
            self._sync_written()
            os.close(self._fd)
        path = self.folder / _segment_name(first)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        if first not in self._segments:
            self._segments.append(first)
        self._end = WalPos(first, first, os.fstat(self._fd).st_size)
        fsync_dir(self.folder)

    def _recover_end(self) -> WalPos:
        """Open the last segment for appending, cutting a torn tail; the end of the log."""
        if not self._segments:
            try:
                index = self._load_cursor_raw()[0]
            except (OSError, ValueError):
                index = 0
            return WalPos(index, index, 0)
        last = self._segments[-1]
        self._fd = os.open(self.folder / _segment_name(last), os.O_RDWR | os.O_APPEND, 0o600)
        size = os.fstat(self._fd).st_size
        count, offset = 0, 0
        while offset + _HEAD.size <= size:
            magic, length, crc = _HEAD.unpack(os.pread(self._fd, _HEAD.size, offset))
            if magic != _MAGIC or offset + _HEAD.size + length > size:
                break
            if zlib.crc32(os.pread(self._fd, length, offset + _HEAD.size)) != crc:
                break
            offset += _HEAD.size + length
            count += 1
        if offset != size:
            log.warning("spool %s: cut a torn record of %d bytes", self.folder, size - offset)
            os.ftruncate(self._fd, offset)
        return WalPos(last + count, last, offset)

    def _load_cursor_raw(self) -> tuple[int, int, int]:
        index, segment, offset = (int(x) for x in self._cursor_path.read_text().split())
        return index, segment, offset

    def _load_cursor(self) -> WalPos:
        if not self._segments:
            return self._end  # nothing to send (the end index came from the cursor)
        start = WalPos(self._segments[0], self._segments[0], 0)
        try:
            pos = WalPos(*self._load_cursor_raw())
        except FileNotFoundError:
            return start
        except (ValueError, TypeError):
            log.warning("spool cursor %s unreadable; resending from the start", self._cursor_path)
            return start
        if pos.segment not in self._segments or not start.index <= pos.index <= self._end.index:
            log.warning("spool cursor %s outside %s; resending from the start", pos, self.folder)
            return start
        return pos

    def _write_cursor(self, pos: WalPos) -> None:
        tmp = self._cursor_path.with_name("cursor.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, f"{pos.index} {pos.segment} {pos.offset}".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._cursor_path)

    def _import_legacy(self, path: Path) -> None:
        """Move what a JSON-lines spool file still holds into this log, then remove the file.

        Each batch is fsynced here before the old cursor moves past it, so a crash in between
        imports it twice (duplicates, dropped by eventId), never not at all."""
        try:
            old = LegacySpoolReader(path)
        except FileNotFoundError:
            return
        except BlockingIOError:
            return  # a publisher that writes JSON lines still runs on it
        moved = 0
        try:
            while entries := old.read(1000):
                records = [e.record for e in entries if e.record is not None]
                self.append(records)
                moved += len(records)
                old.advance(entries[-1].end)
        finally:
            old.close()
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".cursor").unlink(missing_ok=True)
        if moved:
            log.info("moved %d events from the old spool %s into %s", moved, path, self.folder)
