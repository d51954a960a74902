"""The cache file: entries and open intents as one JSON document, written atomically.

The file is written with :func:`runtrail.files.write_atomic` (a temporary file beside the
target, fsynced, renamed over it, the folder fsynced), so a crash leaves either the old file
or the new one, never a torn one. Reading a missing file gives an empty cache (seed 000 §3.5), not an error; a file that exists
but is not a cache file is an error, never silently an empty cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from runtrail.files import private_dir, write_atomic
from runtrail.resume.entry import CacheEntry, Intent

FORMAT = "runtrail.resume-cache"
VERSION = 1


class CacheFileError(ValueError):
    """The file exists but is not a readable cache file."""


def write_cache_file(
    path: Path | str, entries: Iterable[CacheEntry], intents: Iterable[Intent] = ()
) -> int:
    """Write entries (and open intents) atomically; returns how many entries were written."""
    target = Path(path)
    rows = [e.to_json() for e in entries]
    document = {
        "format": FORMAT,
        "version": VERSION,
        "entries": rows,
        "intents": [i.to_json() for i in intents],
    }
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2)
    write_atomic(private_dir(target.parent) / target.name, data)
    return len(rows)


def read_cache_file(path: Path | str) -> tuple[list[CacheEntry], list[Intent]]:
    """Entries and intents of a cache file; both empty when the file does not exist."""
    source = Path(path)
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        return [], []
    try:
        document: Any = orjson.loads(data)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        if document.get("version") != VERSION:
            raise ValueError(f"unsupported version {document.get('version')!r}")
        entries = [CacheEntry.from_json(e) for e in document.get("entries") or []]
        intents = [Intent.from_json(i) for i in document.get("intents") or []]
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise CacheFileError(f"{source}: {exc}") from exc
    return entries, intents
