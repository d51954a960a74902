#!/usr/bin/env python3
"""Verify a runtrail audit export without trusting runtrail's code.

Standard library plus ``rfc8785`` (RFC 8785 JSON canonicalization) only; nothing here imports
runtrail. The format (docs/AUDIT_FORMAT.md): one JSON object per line,
``{"tenantId", "runId", "index", "prevHash", "hash", "event"}``, and for each link

    hash = sha256( prevHash + "|" + JCS(event) ), lowercase hex; the first prevHash is 64 zeros.

Prints ``{"valid", "length", "firstBrokenIndex", "reason"}`` and exits 0 when the chain is
valid, 1 when it is not, 2 when the file cannot be read. With ``--expect-length N
--expect-hash H`` (a head you obtained earlier, e.g. from a signed tree head) it also reports
a chain cut short of it (``truncated``) or not containing it (``rewritten``).
``firstBrokenIndex`` is the 0-based position of the first failing line (blank lines not
counted), never the line's own ``index`` label, which the hash does not cover. A file with no
links is not valid (reason ``no links``).

    python verify_audit_export.py links.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable
from typing import Any

import rfc8785

GENESIS = "0" * 64
KEYS = {"tenantId", "runId", "index", "prevHash", "hash", "event"}


class Malformed(Exception):
    pass


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise Malformed(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _no_constant(name: str) -> Any:
    raise Malformed(f"non-standard literal {name}")


def parse_line(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_strict_object, parse_constant=_no_constant
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise Malformed(f"not JSON: {exc}") from exc
    if not isinstance(obj, dict) or set(obj) != KEYS:
        raise Malformed("a line has exactly the keys " + ", ".join(sorted(KEYS)))
    index, event = obj["index"], obj["event"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise Malformed("index must be a non-negative integer")
    if not isinstance(event, dict):
        raise Malformed("event must be an object")
    fields = ("prevHash", "hash", "tenantId", "runId")
    if not all(isinstance(obj[name], str) for name in fields):
        raise Malformed("prevHash, hash, tenantId and runId must be strings")
    return obj


def link_hash(prev_hash: str, event: dict[str, Any]) -> str:
    try:
        canonical = rfc8785.dumps(event)
    except Exception as exc:  # any canonicalization failure makes the link unreadable
        raise Malformed(f"cannot canonicalize event: {exc}") from exc
    return hashlib.sha256(prev_hash.encode("utf-8", "surrogatepass") + b"|" + canonical).hexdigest()


def verify(path: str, expect_length: int | None, expect_hash: str | None) -> dict[str, Any]:
    with open(path, "rb") as source:
        return verify_lines(source, expect_length, expect_hash)


def verify_lines(
    source: Iterable[bytes], expect_length: int | None = None, expect_hash: str | None = None
) -> dict[str, Any]:
    """The verdict on an export's lines (``verify`` of a file, or a bundle's ``links``)."""
    expected_prev, identity, count = GENESIS, None, 0
    failure: tuple[int | None, str] | None = None
    hashes: list[str] = []
    for raw in source:
        if not raw.strip():
            continue
        position = count
        count += 1
        if failure is not None:
            continue
        try:
            line = parse_line(raw)
        except Malformed:
            failure = (position, "malformed link")
            continue
        label, event = line["index"], line["event"]
        try:
            recomputed = link_hash(line["prevHash"], event)
            run = (event.get("tenantId"), event.get("runId"))
            if not all(isinstance(part, str) and part.strip() for part in run):
                raise Malformed("event has no tenantId/runId")
        except Malformed:
            failure = (position, "malformed link")
            continue
        # firstBrokenIndex is always the position: the index label is not hashed.
        if recomputed != line["hash"]:
            failure = (position, "hash mismatch")
        elif line["prevHash"] != expected_prev:
            failure = (position, "prevHash mismatch")
        elif identity is not None and run != identity:
            failure = (position, "run mismatch")
        elif label != position:
            failure = (position, "index mismatch")
        elif run != (line["tenantId"], line["runId"]):
            failure = (position, "run mismatch")
        else:
            identity, expected_prev = run, line["hash"]
            hashes.append(line["hash"])
    if failure is None and count == 0 and not expect_length:
        failure = (None, "no links")  # verifying nothing is not "valid"
    elif failure is None and expect_length is not None:
        if count < expect_length:
            failure = (count, "truncated")
        elif expect_length > 0 and hashes[expect_length - 1] != expect_hash:
            failure = (expect_length - 1, "rewritten")
    return {
        "valid": failure is None,
        "length": count,
        "firstBrokenIndex": None if failure is None else failure[0],
        "reason": None if failure is None else failure[1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify a runtrail audit export (JSONL).")
    parser.add_argument("export", help="the links.jsonl file")
    parser.add_argument("--expect-length", type=int, help="length of a head you trust")
    parser.add_argument("--expect-hash", help="hash of that head's last link")
    args = parser.parse_args(argv)
    if (args.expect_length is None) != (args.expect_hash is None):
        parser.error("--expect-length and --expect-hash go together")
    try:
        result = verify(args.export, args.expect_length, args.expect_hash)
    except OSError as exc:
        print(json.dumps({"error": str(exc)}), file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0 if result["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
