"""RFC 6962 (and RFC 9162 §2.1) Merkle tree hashes, inclusion and consistency proofs.

Leaf hash ``SHA-256(0x00 || leaf)``, interior node ``SHA-256(0x01 || left || right)``, the
empty tree ``SHA-256("")``; a tree of ``n > 1`` leaves splits at ``k``, the largest power of two
*strictly smaller* than ``n`` (not at the midpoint: that gives a different, non-interoperable
tree for most sizes). Proof verification follows RFC 9162's algorithms, so any other RFC 6962
implementation agrees with ours on every root and every proof.

Functions take the list of *leaf hashes*; hashes are 32 raw bytes. Verifiers return ``False``
for anything malformed (wrong sizes, short hashes, extra or missing proof nodes) instead of
raising, so a caller cannot mistake an exception path for success.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 || leaf)``."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(size: int) -> int:
    """The largest power of two strictly smaller than ``size`` (``size >= 2``)."""
    if size < 2:
        raise ValueError("only a tree of two or more leaves splits")
    return 1 << ((size - 1).bit_length() - 1)


def root_hash(hashes: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes."""
    size = len(hashes)
    if size == 0:
        return EMPTY_ROOT
    if size == 1:
        return hashes[0]
    k = split_point(size)
    return node_hash(root_hash(hashes[:k]), root_hash(hashes[k:]))


#: The hash of the leaves ``lo`` to ``hi`` (exclusive), ``MTH(D[lo:hi])``: how proofs read a
#: tree, be it a list of leaf hashes or a log's stored levels.
RangeRoot = Callable[[int, int], bytes]


def _slices(hashes: Sequence[bytes]) -> RangeRoot:
    return lambda lo, hi: root_hash(hashes[lo:hi])


def inclusion_proof(hashes: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(m, D[n]): the audit path of leaf ``index``."""
    return inclusion_path(_slices(hashes), len(hashes), index)


def inclusion_path(range_root: RangeRoot, size: int, index: int) -> list[bytes]:
    """PATH(index, D[size]) over any tree ``range_root`` reads."""
    if not 0 <= index < size:
        raise IndexError(f"leaf {index} is not in a tree of {size}")
    return _path(range_root, 0, size, index)


def _path(range_root: RangeRoot, lo: int, hi: int, index: int) -> list[bytes]:
    if hi - lo <= 1:
        return []
    mid = lo + split_point(hi - lo)
    if index < mid:
        return [*_path(range_root, lo, mid, index), range_root(mid, hi)]
    return [*_path(range_root, mid, hi, index), range_root(lo, mid)]


def consistency_proof(hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """PROOF(m, D[n]): that the first ``old_size`` leaves are a prefix of the tree."""
    return consistency_path(_slices(hashes), old_size, len(hashes))


def consistency_path(range_root: RangeRoot, old_size: int, size: int) -> list[bytes]:
    """PROOF(old_size, D[size]) over any tree ``range_root`` reads."""
    if not 0 <= old_size <= size:
        raise ValueError(f"old size {old_size} is not within 0..{size}")
    if old_size in (0, size):
        return []
    return _subproof(range_root, old_size, 0, size, complete=True)


def _subproof(range_root: RangeRoot, m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
    n = hi - lo
    if m == n:
        return [] if complete else [range_root(lo, hi)]
    mid = lo + split_point(n)
    if m <= mid - lo:
        return [*_subproof(range_root, m, lo, mid, complete), range_root(mid, hi)]
    return [*_subproof(range_root, m - (mid - lo), mid, hi, False), range_root(lo, mid)]


def _well_formed(*hashes: bytes) -> bool:
    return all(isinstance(h, bytes) and len(h) == HASH_SIZE for h in hashes)


def root_from_inclusion_proof(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes]
) -> bytes | None:
    """The root a proof leads to (RFC 9162 §2.1.3.2), or ``None`` if it cannot be one."""
    if not 0 <= index < size or not _well_formed(leaf, *proof):
        return None
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree of ``size``/``root``."""
    return _well_formed(root) and root_from_inclusion_proof(leaf, index, size, proof) == root


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> bool:
    """Whether ``proof`` shows the tree ``old_size``/``old_root`` is a prefix of the new one."""
    if not 0 <= old_size <= new_size or not _well_formed(*proof):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof
    if not proof or not _well_formed(old_root, new_root):
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is a node of the path
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root
