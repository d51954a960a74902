"""Reading records back from a file or object-store sink, each record once.

Delivery is at-least-once, so a record can be written twice (an identical line, or the same
record in two objects); readers return the first occurrence of each recordId only. A line
still being written (no newline yet) is never returned.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from pydantic import ValidationError

from runtrail.capture.layout import tenant_segment
from runtrail.capture.record import NODE_TYPES, NodeIoRecord, NodeType
from runtrail.capture.repair import capture_files, files_of_day
from runtrail.extras import require
from runtrail.persistence.url_options import split_options
from runtrail.persistence.urls import file_path

OBJECT_RE = re.compile(r"(^|/)capture-[0-9a-f]+\.jsonl(\.zst)?$")
_PLAIN = re.compile(r"^[A-Za-z0-9_.:@+=-]+$")


class CaptureReadError(ValueError):
    """A complete line of a capture file or object is not a valid record."""


def _file_lines(root: Path, tenant: str | None) -> Iterator[tuple[str, bytes]]:
    files: Iterator[Path]
    if tenant is not None:
        day_root = root / tenant_segment(tenant)
        files = (p for day in sorted(day_root.glob("*/")) for p in files_of_day(day))
    else:
        files = capture_files(root)
    for path in files:
        with path.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if line.endswith(b"\n"):
                    yield f"{path}:{number}", line


def _object_lines(
    url: str, tenant: str | None, options: dict[str, Any]
) -> Iterator[tuple[str, bytes]]:
    require("obstore", f"reading capture records at {urlsplit(url).scheme}://")
    import obstore

    from runtrail.persistence.object_store import open_object_store

    store = open_object_store(url, options)
    prefix = tenant_segment(tenant) + "/" if tenant is not None else None
    paths: list[str] = []
    for chunk in obstore.list(store, prefix):
        paths.extend(meta["path"] for meta in chunk if OBJECT_RE.search(meta["path"]))
    for path in sorted(paths):
        body = bytes(obstore.get(store, path).bytes())
        if path.endswith(".zst"):
            zstandard = require("zstandard", "reading compressed capture objects (.jsonl.zst)")
            body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        for number, line in enumerate(body.splitlines(keepends=True), 1):
            if line.endswith(b"\n"):
                yield f"{path}:{number}", line


def iter_records(
    url: str,
    run_id: str | None = None,
    node_type: NodeType | None = None,
    tenant: str | None = None,
    **options: Any,
) -> Iterator[NodeIoRecord]:
    """Records under a sink URL matching the filters, each recordId once, in stored order."""
    if node_type is not None and node_type not in NODE_TYPES:
        raise ValueError(f"node_type must be one of {NODE_TYPES}, not {node_type!r}")
    base, opts = split_options(url, options)
    scheme = urlsplit(base).scheme.lower()
    if scheme == "memory":
        raise ValueError("an in-memory sink is read through its records() method, not a URL")
    if scheme == "file":
        lines = _file_lines(file_path(base), tenant)
    else:
        for name in ("compression", "zstd_level", "batch_bytes"):
            opts.pop(name, None)  # sink-side options, meaningless to a reader
        lines = _object_lines(base, tenant, opts)
    needle = run_id.encode() if run_id is not None and _PLAIN.match(run_id) else None
    seen: set[str] = set()
    for where, line in lines:
        if needle is not None and needle not in line:
            continue  # cheap pre-filter: a plain run ID appears verbatim in its records
        if not line.strip(b" \t\r\n\x00"):
            continue
        try:
            record = NodeIoRecord.from_json(line)
        except (ValidationError, orjson.JSONDecodeError) as exc:
            raise CaptureReadError(f"{where}: not a node record: {exc}") from exc
        if record.record_id in seen:
            continue
        if (
            (run_id is not None and record.run_id != run_id)
            or (node_type is not None and record.node_type != node_type)
            or (tenant is not None and record.tenant_id != tenant)
        ):
            continue
        seen.add(record.record_id)
        yield record


def read_records(
    url: str,
    run_id: str | None = None,
    node_type: NodeType | None = None,
    tenant: str | None = None,
    **options: Any,
) -> list[NodeIoRecord]:
    """All matching records of a file or object-store sink, de-duplicated by recordId."""
    return list(iter_records(url, run_id, node_type, tenant, **options))


def find_record(
    url: str, record_id: str, tenant: str | None = None, **options: Any
) -> NodeIoRecord | None:
    """One record by its ID (a scan: records are laid out by tenant and date, not by ID)."""
    for record in iter_records(url, tenant=tenant, **options):
        if record.record_id == record_id:
            return record
    return None
