"""Writes the JSON-lines spool file of an older publisher, for the tests of its import.

The library only reads this format (:mod:`runtrail.publisher.legacy_spool`); the writer is
here, made from the format's description rather than from the reader, so that a test of the
reader compares it with an independent writer.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path

import orjson

from runtrail.publisher.spool_record import SpoolRecord, path_component


def spool_line(record: SpoolRecord) -> bytes:
    """One record as a JSON line: key, value and header values base64, and the event ID."""
    doc = {
        "k": None if record.key is None else base64.b64encode(record.key).decode(),
        "v": base64.b64encode(record.value).decode(),
        "h": [[name, base64.b64encode(value).decode()] for name, value in record.headers],
        "id": record.event_id,
    }
    return orjson.dumps(doc) + b"\n"


def legacy_spool_path(spool_dir: Path, tenant: str, topic: str) -> Path:
    """Where an older publisher kept the spool of slot 0 of ``topic``."""
    return spool_dir / path_component(tenant) / f"{path_component(topic)}.spool"


def write_legacy_spool(
    path: Path, records: Sequence[SpoolRecord | bytes], acknowledged: int = 0
) -> None:
    """Write ``records`` (raw ``bytes`` go in as they are: an unreadable line, a torn tail)
    and, when ``acknowledged`` is above 0, a cursor just past that many of them."""
    lines = [r if isinstance(r, bytes) else spool_line(r) for r in records]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    if acknowledged:
        cursor = sum(len(line) for line in lines[:acknowledged])
        path.with_name(path.name + ".cursor").write_text(str(cursor))
