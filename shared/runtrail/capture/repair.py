"""Crash repair of JSONL capture files: cut a partial last line so no reader ever sees it.

A writer killed mid-append leaves a line without its newline. On open, the file sink truncates
every such file back to its last complete line, but only files no live writer holds (writers
keep an exclusive ``flock`` on the file they append to). The records of the cut line were not
yet committed, so they are captured again from Kafka.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

FILE_RE = re.compile(r"^capture-(\d+)\.jsonl$")
_CHUNK = 64 * 1024


def capture_files(root: Path) -> Iterator[Path]:
    """Every ``<root>/<tenant>/<date>/capture-<n>.jsonl``, in tenant, date, n order."""
    if not root.is_dir():
        return
    for tenant in sorted(p for p in root.iterdir() if p.is_dir()):
        for day in sorted(p for p in tenant.iterdir() if p.is_dir()):
            yield from files_of_day(day)


def files_of_day(day: Path) -> list[Path]:
    """The capture files of one ``<tenant>/<date>`` directory, by number."""
    numbered = []
    for entry in os.scandir(day):
        match = FILE_RE.match(entry.name)
        if match and entry.is_file():
            numbered.append((int(match.group(1)), Path(entry.path)))
    return [path for _, path in sorted(numbered)]


def complete_length(fd: int, size: int) -> int:
    """Length of the file's prefix that ends with its last newline (0 if there is none)."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def repair_file(path: Path) -> bool:
    """Truncate a partial last line away; ``True`` if the file was cut."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer owns it; its tail is a line in progress
        size = os.fstat(fd).st_size
        keep = complete_length(fd, size)
        if keep == size:
            return False
        os.ftruncate(fd, keep)
        os.fsync(fd)
        return True
    finally:
        os.close(fd)  # also releases the lock


def repair_tree(root: Path) -> list[Path]:
    """Repair every capture file under ``root``; returns the files that were cut."""
    return [path for path in capture_files(root) if repair_file(path)]
