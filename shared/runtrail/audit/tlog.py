"""The transparency log: one RFC 6962 tree over every sealed link, and its C2SP tiles.

Each link the store keeps is the next **leaf** of one append-only tree per origin; the leaf's
entry is the link's 32-byte hash and nothing else (``SHA-256(0x00 || hash)`` is its leaf
hash), so the log says nothing about tenants, runs or events to anyone without the links.
Leaf indexes are fixed in the transaction that stores the link (:mod:`.store_sql`), so the
tree only ever grows: any two of its checkpoints are linked by a consistency proof.

:class:`LogTree` keeps the tree's stored hashes by level (level ``k`` node ``j`` covers leaves
``j·2^k`` to ``(j+1)·2^k``), the layout C2SP tlog-tiles publishes: tile ``(L, N)`` holds the
level-``8L`` hashes ``256·N`` onwards, ``tile/entries/N`` the entries of tile ``(0, N)``, each
as a big-endian ``uint16`` length and the entry bytes. Proofs and any earlier root come from
the stored hashes in ``O(log² n)``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from runtrail.audit.errors import AuditError
from runtrail.audit.merkle import EMPTY_ROOT, consistency_path, inclusion_path, split_point
from runtrail.audit.tree_head import TreeHead

#: Tile height (C2SP tlog-tiles): a full tile holds 2^8 hashes or entries.
TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
ENTRY_SIZE = 32
#: Entries read from the store per query when a tree catches up.
READ_CHUNK = 65_536


class InconsistentLog(AuditError):
    """The tree is not an extension of a checkpoint already signed: nothing may be signed."""


def leaf_hashes(entries: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 leaf hashes of entries."""
    sha = hashlib.sha256
    return [sha(b"\x00" + entry).digest() for entry in entries]


class LogTree:
    """The log's stored hashes, grown leaf by leaf (never rewritten)."""

    def __init__(self) -> None:
        self.levels: list[list[bytes]] = [[]]
        self.entries: list[bytes] = []

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def extend(self, entries: Sequence[bytes]) -> None:
        """Append entries (each a link's 32-byte hash) as the next leaves."""
        if any(len(entry) != ENTRY_SIZE for entry in entries):
            raise ValueError("a log entry is a 32-byte link hash")
        self.entries.extend(entries)
        self.levels[0].extend(leaf_hashes(entries))
        sha = hashlib.sha256
        level = 0
        while len(self.levels[level]) >= 2:
            below = self.levels[level]
            if level + 1 == len(self.levels):
                self.levels.append([])
            above = self.levels[level + 1]
            start = len(above) * 2
            above.extend(
                sha(b"\x01" + below[i] + below[i + 1]).digest()
                for i in range(start, len(below) - 1, 2)
            )
            level += 1

    def range_root(self, lo: int, hi: int) -> bytes:
        """``MTH`` of leaves ``lo`` to ``hi``: a stored hash when aligned, else composed."""
        width = hi - lo
        if width <= 0:
            return EMPTY_ROOT
        if width & (width - 1) == 0 and lo % width == 0:
            return self.levels[width.bit_length() - 1][lo // width]
        mid = lo + split_point(width)
        return hashlib.sha256(
            b"\x01" + self.range_root(lo, mid) + self.range_root(mid, hi)
        ).digest()

    def root(self, size: int | None = None) -> bytes:
        """The root of the first ``size`` leaves (all of them by default)."""
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ValueError(f"the log has {self.size} leaves, not {size}")
        return self.range_root(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        return inclusion_path(self.range_root, self.size if size is None else size, index)

    def consistency_proof(self, old_size: int, size: int | None = None) -> list[bytes]:
        return consistency_path(self.range_root, old_size, self.size if size is None else size)

    def checkpoint(self, origin: str, previous: TreeHead | None = None) -> TreeHead:
        """The checkpoint of the whole tree; :class:`InconsistentLog` unless it extends
        ``previous`` (the last one signed): a log never signs two histories."""
        if previous is not None:
            if previous.origin != origin:
                raise InconsistentLog(f"origin {previous.origin!r} is not {origin!r}")
            if previous.size > self.size:
                raise InconsistentLog(
                    f"the log has {self.size} leaves; {previous.size} were already signed"
                )
            if self.root(previous.size) != previous.root_hash:
                raise InconsistentLog(f"the first {previous.size} leaves changed since signed")
        return TreeHead(origin, self.size, self.root())


class LogReader(Protocol):
    """What a tree catches up from: the store's log (:class:`~runtrail.audit.store.LinkStore`)."""

    def log_size(self) -> int: ...

    def log_entries(self, start: int, end: int) -> list[bytes]: ...


def catch_up(tree: LogTree, reader: LogReader, size: int | None = None) -> LogTree:
    """Grow ``tree`` with the leaves the store has beyond it (up to ``size``)."""
    target = reader.log_size() if size is None else size
    while tree.size < target:
        entries = reader.log_entries(tree.size, min(target, tree.size + READ_CHUNK))
        if not entries:
            raise InconsistentLog(f"the log's leaves stop at {tree.size}, not {target}")
        tree.extend(entries)
    return tree


def _b64(nodes: Sequence[bytes]) -> list[str]:
    return [base64.b64encode(node).decode() for node in nodes]


def inclusion_json(tree: LogTree, leaf_index: int, size: int) -> dict[str, Any]:
    """``{leafIndex, treeSize, entry, proof}``: the entry (a link hash, hex) is in the tree of
    ``size`` leaves (RFC 9162 §2.1.3; hashes in base64, as checkpoints write them)."""
    return {
        "leafIndex": leaf_index,
        "treeSize": size,
        "entry": tree.entries[leaf_index].hex(),
        "proof": _b64(tree.inclusion_proof(leaf_index, size)),
    }


def consistency_json(tree: LogTree, old_size: int, size: int) -> dict[str, Any]:
    """``{oldSize, newSize, proof}``: the tree of ``old_size`` is a prefix of that of ``size``."""
    return {
        "oldSize": old_size,
        "newSize": size,
        "proof": _b64(tree.consistency_proof(old_size, size)),
    }


# --- tiles ---------------------------------------------------------------------------------


def index_path(n: int) -> str:
    """``N`` as C2SP writes it in a path: 3-digit groups, all but the last prefixed ``x``
    (1234067 → ``x001/x234/067``)."""
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*(f"x{group}" for group in groups[:-1]), groups[-1]])


def tile_path(level: int | None, n: int, width: int = TILE_WIDTH) -> str:
    """``tile/<L>/<N>[.p/<W>]``, or ``tile/entries/<N>[.p/<W>]`` for ``level=None``."""
    partial = f".p/{width}" if width < TILE_WIDTH else ""
    return f"tile/{'entries' if level is None else level}/{index_path(n)}{partial}"


@dataclass(frozen=True, slots=True)
class Tile:
    """One tile (``level`` None: an entry bundle) of a tree of some size."""

    level: int | None
    n: int
    width: int

    @property
    def path(self) -> str:
        return tile_path(self.level, self.n, self.width)


def new_tiles(old_size: int, size: int) -> Iterator[Tile]:
    """The tiles and entry bundles a tree of ``size`` has that one of ``old_size`` had not
    (full, or wider): what growing from one to the other writes (as Go's ``tlog.NewTiles``)."""
    level = 0
    while size >> (TILE_HEIGHT * level) > 0:
        old_n, new_n = old_size >> (TILE_HEIGHT * level), size >> (TILE_HEIGHT * level)
        if old_n != new_n:
            for n in range(old_n >> TILE_HEIGHT, (new_n + TILE_WIDTH - 1) >> TILE_HEIGHT):
                width = min(TILE_WIDTH, new_n - n * TILE_WIDTH)
                yield Tile(level, n, width)
                if level == 0:
                    yield Tile(None, n, width)
        level += 1


def tile_bytes(tree: LogTree, tile: Tile) -> bytes:
    """A tile's hashes, or an entry bundle's length-prefixed entries."""
    start = tile.n * TILE_WIDTH
    if tile.level is None:
        return b"".join(
            len(entry).to_bytes(2, "big") + entry
            for entry in tree.entries[start : start + tile.width]
        )
    return b"".join(tree.levels[TILE_HEIGHT * tile.level][start : start + tile.width])


def read_entry_bundle(data: bytes) -> list[bytes]:
    """The entries of a bundle; :class:`ValueError` if it is not length-prefixed entries."""
    entries, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise ValueError("an entry bundle ends inside a length")
        length = int.from_bytes(data[at : at + 2], "big")
        if at + 2 + length > len(data):
            raise ValueError("an entry bundle ends inside an entry")
        entries.append(data[at + 2 : at + 2 + length])
        at += 2 + length
    return entries
