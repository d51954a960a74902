"""A reader of the JSON-lines spool file an older publisher wrote.

Why it exists: before the write-ahead log (:mod:`runtrail.publisher.wal`), the publisher kept
unacknowledged events in ``<spool_dir>/<tenant>/<topic>.spool`` (``<topic>.<n>.spool`` for
slot ``n``). A publisher upgraded with events still in such a file must send them, so
:meth:`runtrail.publisher.wal.Wal.open_for` moves what the file of its slot holds into the log
and removes it. The Python publisher no longer writes this format, so the library only reads
it (the Java ai4j adapter writes the same lines to a spool of its own, ``<topic>.ai4j.spool``).

The format: one JSON line per record, ``{"k", "v", "h", "id"}`` with the Kafka key, value and
header values base64-encoded, so a resend is byte-identical to the first attempt. A cursor
file beside it (``<file>.cursor``) holds the byte offset of the first record the broker had
not acknowledged. The writer held an exclusive ``flock`` on the file while it ran.

What the reader keeps of the writer's guarantees: it reads only whole lines (a crash
mid-append left a torn last line, which is never a record), a cursor it cannot trust means
reading from the start (duplicates, which consumers drop by eventId, rather than losses), and
the cursor it stores is durable before the records behind it are forgotten.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from runtrail.files import write_atomic
from runtrail.publisher.spool_record import SpoolRecord

log = logging.getLogger(__name__)


def parse_line(line: bytes) -> SpoolRecord:
    """The record of one spool line (raises ``ValueError``, ``KeyError`` or ``TypeError`` on a
    line that is not one)."""
    doc = orjson.loads(line)
    key = doc["k"]
    return SpoolRecord(
        key=None if key is None else base64.b64decode(key, validate=True),
        value=base64.b64decode(doc["v"], validate=True),
        headers=tuple((str(n), base64.b64decode(v, validate=True)) for n, v in doc["h"]),
        event_id=doc.get("id"),
    )


@dataclass(frozen=True, slots=True)
class LegacySpoolEntry:
    """A record read from the file and the offset just past it (``record`` None: unreadable)."""

    record: SpoolRecord | None
    end: int


class LegacySpoolReader:
    """A locked spool file, read from its cursor; the cursor moves only past what was taken."""

    def __init__(self, path: Path) -> None:
        """Open and lock ``path``; raises ``BlockingIOError`` while an older publisher holds it
        (it is still sending from it) and ``FileNotFoundError`` when there is none."""
        self.path = path
        self._cursor_path = path.with_name(path.name + ".cursor")
        self._fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise
        self._size = os.fstat(self._fd).st_size
        self._cursor = self._load_cursor()

    def read(self, max_records: int) -> list[LegacySpoolEntry]:
        """Up to ``max_records`` whole records from the cursor, in order."""
        entries: list[LegacySpoolEntry] = []
        with open(self.path, "rb") as reader:
            reader.seek(self._cursor)
            pos = self._cursor
            while pos < self._size and len(entries) < max_records:
                line = reader.readline()
                if not line.endswith(b"\n"):
                    log.warning("spool %s: left a torn record of %d bytes", self.path, len(line))
                    break
                pos += len(line)
                try:
                    record: SpoolRecord | None = parse_line(line)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("unreadable spool record at %s:%d: %s", self.path, pos, exc)
                    record = None
                entries.append(LegacySpoolEntry(record, pos))
        return entries

    def advance(self, offset: int) -> None:
        """Store ``offset`` (an entry's ``end``) as the cursor, durably: the records before it
        are taken and will not be read again."""
        if offset <= self._cursor:
            return
        if offset > self._size:
            raise ValueError(f"cursor {offset} beyond spool end {self._size}")
        write_atomic(self._cursor_path, str(offset).encode())
        self._cursor = offset

    def close(self) -> None:
        """Unlock and close."""
        if self._fd < 0:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = -1

    def _load_cursor(self) -> int:
        """The stored cursor, or 0 (read everything) when it is missing or cannot be trusted."""
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
