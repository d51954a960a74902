#!/usr/bin/env python3
"""Verify runtrail's transparency log, or one run's offline proof bundle, without runtrail.

Needs the Python standard library, ``cryptography`` (Ed25519) and ``rfc8785`` (through
``verify_audit_export.py``, which must sit beside this file); nothing here imports runtrail.
The format is docs/AUDIT_FORMAT.md §5.

    python verify_audit_log.py log --log DIR|URL --vkey NAME+ID+KEY [--old NOTE]...
    python verify_audit_log.py bundle BUNDLE.json [--vkey KEY] [--witness KEY]... [--quorum K]

``log`` checks the signed ``checkpoint``, rebuilds the tree from every entry bundle, checks its
root and every tile byte for byte, and holds it to each older checkpoint you kept: a smaller
tree than one already seen is a ``rollback``, a different root at an old size a ``fork``.
``bundle`` checks the run's chain, the checkpoint's signature and witness cosignatures, and
the inclusion proof of every link: a link whose hash is not the one the log holds at its
leaf is ``rewritten`` (``firstBrokenIndex`` is the first such link), fewer links than the
log holds is ``truncated``. Both print ``{"valid", "reason", "detail", …}`` and exit 0 when
valid, 1 when not, 2 when the input cannot be read.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_audit_export import verify_lines

SIGNATURE_PREFIX = "\u2014 "
TILE_WIDTH = 256


class Unreadable(Exception):
    pass


class Finding(Exception):
    def __init__(self, reason: str, detail: str, index: int | None = None) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.index = reason, detail, index


# --- signed notes and cosignatures -----------------------------------------------------------
def _key(vkey: str, kind: int) -> tuple[str, bytes, Ed25519PublicKey]:
    name, hex_id, material = vkey.strip().split("+", 2)
    raw = base64.b64decode(material, validate=True)
    if len(raw) != 33 or raw[0] != kind:
        raise Unreadable(f"key {name} is not of type {kind:#04x}")
    key_id = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4]
    if key_id.hex() != hex_id:
        raise Unreadable(f"key ID of {name} does not match")
    return name, key_id, Ed25519PublicKey.from_public_bytes(raw[1:])


def _split(note: str) -> tuple[str, list[str]]:
    at = note.rfind("\n\n")
    if at < 0 or not note.endswith("\n"):
        raise Finding("bad signature", "not a signed note")
    return note[: at + 1], note[at + 2 : -1].split("\n")


def _blobs(lines: list[str], name: str, key_id: bytes) -> list[bytes]:
    found = []
    for line in lines:
        if line.startswith(f"{SIGNATURE_PREFIX}{name} "):
            blob = base64.b64decode(line.rsplit(" ", 1)[1])
            if blob[:4] == key_id:
                found.append(blob[4:])
    return found


def open_checkpoint(note: str, vkey: str) -> tuple[str, int, bytes]:
    """(origin, size, root) of a checkpoint the log's key signed; Finding otherwise."""
    name, key_id, key = _key(vkey, 0x01)
    body, lines = _split(note)
    signatures = _blobs(lines, name, key_id)
    if not signatures:
        raise Finding("bad signature", f"no signature by {name}")
    for signature in signatures:
        try:
            key.verify(signature, body.encode())
        except InvalidSignature:
            raise Finding("bad signature", f"the signature by {name} does not verify") from None
    origin, size, root = body[:-1].split("\n")[:3]
    return origin, int(size), base64.b64decode(root)


def cosigners(note: str, witness_vkeys: Sequence[str]) -> list[str]:
    """The witnesses whose cosignature/v1 over the note's body verifies."""
    body, lines = _split(note)
    names = []
    for vkey in witness_vkeys:
        name, key_id, key = _key(vkey, 0x04)
        for blob in _blobs(lines, name, key_id):
            timestamp = int.from_bytes(blob[:8], "big")
            message = f"cosignature/v1\ntime {timestamp}\n{body}".encode()
            try:
                key.verify(blob[8:], message)
            except InvalidSignature:
                continue
            names.append(name)
            break
    return names


# --- RFC 6962 --------------------------------------------------------------------------------
def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def levels_of(entries: Sequence[bytes]) -> list[list[bytes]]:
    """Every complete subtree hash: level k node j covers leaves j*2^k .. (j+1)*2^k."""
    levels = [[hashlib.sha256(b"\x00" + entry).digest() for entry in entries]]
    while len(levels[-1]) >= 2:
        below = levels[-1]
        levels.append([_node(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])
    return levels


def root_of(levels: list[list[bytes]], lo: int, hi: int) -> bytes:
    width = hi - lo
    if width == 0:
        return hashlib.sha256(b"").digest()
    if width & (width - 1) == 0 and lo % width == 0:
        return levels[width.bit_length() - 1][lo // width]
    mid = lo + (1 << ((width - 1).bit_length() - 1))
    return _node(root_of(levels, lo, mid), root_of(levels, mid, hi))


def included(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


# --- the log ---------------------------------------------------------------------------------
def _reader(base: str) -> Any:
    if base.startswith("file://"):  # what `runtrail audit log-checkpoint` prints
        base = urllib.request.url2pathname(urllib.parse.urlsplit(base).path)

    def read(path: str) -> bytes:
        if base.startswith(("http://", "https://")):
            try:
                with urllib.request.urlopen(f"{base.rstrip('/')}/{path}", timeout=30) as r:
                    return bytes(r.read())
            except OSError as exc:
                raise Finding("missing object", f"{path}: {exc}") from exc
        try:
            return (Path(base) / path).read_bytes()
        except OSError as exc:
            raise Finding("missing object", f"{path}: {exc}") from exc

    return read


def _index_path(n: int) -> str:
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*(f"x{g}" for g in groups[:-1]), groups[-1]])


def _path(level: str, n: int, width: int) -> str:
    return f"tile/{level}/{_index_path(n)}" + (f".p/{width}" if width < TILE_WIDTH else "")


def verify_log(base: str, vkey: str, old_notes: Sequence[str]) -> dict[str, Any]:
    read = _reader(base)
    origin, size, root = open_checkpoint(read("checkpoint").decode(), vkey)
    entries: list[bytes] = []
    for n in range((size + TILE_WIDTH - 1) // TILE_WIDTH):
        width = min(TILE_WIDTH, size - n * TILE_WIDTH)
        path, data, at, count = _path("entries", n, width), read(_path("entries", n, width)), 0, 0
        while at < len(data) and count < width:
            length = int.from_bytes(data[at : at + 2], "big")
            entries.append(data[at + 2 : at + 2 + length])
            at, count = at + 2 + length, count + 1
        if count != width or at != len(data):
            raise Finding("edited entries", f"{path} does not hold {width} entries")
    levels = levels_of(entries)
    if root_of(levels, 0, size) != root:
        raise Finding("edited entries", "the entries do not hash to the checkpoint's root")
    level = 0
    while size >> (8 * level) > 0:
        count = size >> (8 * level)
        for n in range((count + TILE_WIDTH - 1) // TILE_WIDTH):
            width = min(TILE_WIDTH, count - n * TILE_WIDTH)
            expected = b"".join(levels[8 * level][n * TILE_WIDTH : n * TILE_WIDTH + width])
            if read(_path(str(level), n, width)) != expected:
                raise Finding("edited tile", f"{_path(str(level), n, width)} is not the tree's")
        level += 1
    for note in old_notes:
        old_origin, old_size, old_root = open_checkpoint(note, vkey)
        if old_origin != origin:
            raise Finding("fork", f"an older checkpoint has origin {old_origin!r}")
        if old_size > size:
            raise Finding("rollback", f"the log has {size} leaves, an older checkpoint {old_size}")
        if root_of(levels, 0, old_size) != old_root:
            raise Finding("fork", f"the first {old_size} leaves are not those signed before")
    return {"valid": True, "origin": origin, "size": size, "reason": None, "detail": None}


# --- a bundle --------------------------------------------------------------------------------
def verify_bundle(
    bundle: dict[str, Any], vkey: str | None, witnesses: Sequence[str] | None, quorum: int | None
) -> dict[str, Any]:
    keys = bundle.get("keys") or {}
    vkey = vkey or keys.get("log")
    if not vkey:
        raise Unreadable("no log key: give --vkey")
    witnesses = list(keys.get("witnesses") or []) if witnesses is None else witnesses
    quorum = int(keys.get("quorum") or 0) if quorum is None else quorum
    lines = [line.encode() for line in bundle["links"].splitlines(keepends=True)]
    chain = verify_lines(lines)
    out: dict[str, Any] = {**chain, "witnessedBy": [], "detail": None}
    if not chain["valid"]:
        return out
    _, size, root = open_checkpoint(bundle["checkpoint"], vkey)
    out["witnessedBy"] = cosigners(bundle["checkpoint"], witnesses)
    if len(out["witnessedBy"]) < quorum:
        detail = f"{len(out['witnessedBy'])} of {quorum} witness cosignatures"
        return {**out, "valid": False, "reason": "not witnessed", "detail": detail}
    hashes = [json.loads(line)["hash"] for line in lines if line.strip()]
    proofs = bundle["proofs"]
    for position, item in enumerate(proofs):
        if item["index"] != position or bundle["treeSize"] != size:
            raise Unreadable("the bundle's proofs are not one per link in order")
        if position >= len(hashes):
            return {**out, "valid": False, "reason": "truncated", "firstBrokenIndex": position,
                    "detail": f"the log holds {len(proofs)} links of this run"}  # fmt: skip
        leaf = hashlib.sha256(b"\x00" + bytes.fromhex(hashes[position])).digest()
        proof = [base64.b64decode(node) for node in item["proof"]]
        if not included(leaf, item["leafIndex"], size, proof, root):
            detail = f"link {position} is not the one logged at leaf {item['leafIndex']}"
            return {**out, "valid": False, "reason": "rewritten", "firstBrokenIndex": position,
                    "detail": detail}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify runtrail's transparency log or a bundle.")
    commands = parser.add_subparsers(dest="command", required=True)
    log = commands.add_parser("log", help="a log's checkpoint, tiles and entries")
    log.add_argument("--log", required=True, help="folder, file:// or http(s) URL of the log")
    log.add_argument("--vkey", required=True, help="the log's verifier key")
    log.add_argument("--old", action="append", default=[], type=Path, help="older checkpoints")
    bundle = commands.add_parser("bundle", help="one run's offline proof bundle")
    bundle.add_argument("bundle", type=Path)
    bundle.add_argument("--vkey", help="the log's verifier key (default: the bundle's)")
    bundle.add_argument("--witness", action="append", help="a trusted witness key (repeat)")
    bundle.add_argument("--quorum", type=int, help="cosignatures required")
    args = parser.parse_args(argv)
    try:
        if args.command == "log":
            olds = [path.read_text("utf-8") for path in args.old]
            try:
                result = verify_log(args.log, args.vkey, olds)
            except Finding as finding:
                result = {"valid": False, "reason": finding.reason, "detail": finding.detail}
        else:
            data = json.loads(args.bundle.read_text("utf-8"))
            try:
                result = verify_bundle(data, args.vkey, args.witness, args.quorum)
            except Finding as finding:
                result = {"valid": False, "reason": finding.reason, "detail": finding.detail}
    except (OSError, ValueError, KeyError, TypeError, Unreadable) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0 if result["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
