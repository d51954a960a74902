"""JSONL export of a run's chain, and its verification without any database.

One line per link, in index order, each line the RFC 8785 form of
``{"event", "hash", "index", "prevHash", "runId", "tenantId"}`` followed by ``\\n``; the file is
UTF-8. The line's ``tenantId``/``runId`` are labels for humans and tools: they must equal the
event's own, which is what the hash covers. See ``docs/AUDIT_FORMAT.md``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from runtrail.audit.errors import MalformedLink
from runtrail.audit.link import Link, link_from_json
from runtrail.audit.verify import RUN_MISMATCH, ChainVerification, ChainVerifier
from runtrail.events.errors import EventError
from runtrail.events.jsonform import canonical_bytes, loads_strict
from runtrail.files import private_dir


def export_lines(links: Iterable[Link]) -> Iterator[bytes]:
    """The export's lines (each ending in ``\\n``)."""
    for link in links:
        yield canonical_bytes(link.to_json()) + b"\n"


def write_export(path: str | Path, links: Iterable[Link]) -> int:
    """Write the export atomically (temp file, fsync, rename); returns the number of links."""
    target = Path(path)
    private_dir(target.parent)
    count = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for line in export_lines(links):
                out.write(line)
                count += 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def read_export(path: str | Path) -> list[Link]:
    """All links of an export; :class:`MalformedLink` at the first line that cannot be read."""
    links: list[Link] = []
    for number, raw in _lines(path):
        try:
            links.append(_parse_line(raw)[0])
        except MalformedLink as exc:
            raise MalformedLink(f"line {number}: {exc}") from exc
    return links


def verify_export(path: str | Path) -> ChainVerification:
    """Verify an export file from genesis, streaming; labels must match the events."""
    verifier = ChainVerifier()
    for number, raw in _lines(path):
        try:
            link, tenant, run = _parse_line(raw)
        except MalformedLink as exc:
            verifier.add_malformed(f"line {number}: {exc}")
            continue
        verifier.add(link)
        try:
            labels_match = (tenant, run) == (link.tenant_id, link.run_id)
        except MalformedLink:
            labels_match = True  # the verifier has already reported the event itself
        if not labels_match:
            verifier.fail_last(RUN_MISMATCH, f"line {number} labels {tenant}/{run}")
    return verifier.result()


def _lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) for every non-blank line."""
    with open(path, "rb") as source:
        for number, raw in enumerate(source, start=1):
            if raw.strip():
                yield number, raw


def _parse_line(raw: bytes) -> tuple[Link, str, str]:
    try:
        obj = loads_strict(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, EventError) as exc:
        raise MalformedLink(f"not JSON: {exc}") from exc
    return link_from_json(obj)
