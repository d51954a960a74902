"""RFC 6962 Merkle trees against the published reference vectors, and corrupted proofs."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.audit.merkle import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_hash,
    split_point,
    verify_consistency,
    verify_inclusion,
)

# The RFC 6962 test vectors of the certificate-transparency / transparency-dev reference code
# (transparency-dev/merkle proof/verify_test.go): eight leaves, and the root of each prefix.
LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # empty tree
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (0-based leaf index, tree size, audit path) from the same reference.
INCLUSION = [
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
# (old size, new size, consistency proof) from the same reference.
CONSISTENCY = [
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")
HASHES = [leaf_hash(leaf) for leaf in LEAVES]


def naive_root(leaves: list[bytes]) -> bytes:
    """MTH straight from RFC 6962 §2.1, on raw leaves, with hashlib only."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + naive_root(leaves[:k]) + naive_root(leaves[k:])).digest()


def h(hexes: list[str]) -> list[bytes]:
    return [bytes.fromhex(x) for x in hexes]


def flip(proof: list[bytes], i: int, mask: int = 8) -> list[bytes]:
    out = list(proof)
    out[i] = bytes([out[i][0] ^ mask]) + out[i][1:]
    return out


# --- roots -----------------------------------------------------------------------------------
@pytest.mark.parametrize("size", range(len(ROOTS)))
def test_reference_roots(size: int) -> None:
    assert root_hash(HASHES[:size]).hex() == ROOTS[size]
    assert naive_root(LEAVES[:size]).hex() == ROOTS[size]


def test_empty_root_and_prefixes() -> None:
    assert EMPTY_ROOT.hex() == ROOTS[0]
    assert leaf_hash(b"").hex() == ROOTS[1]
    assert node_hash(HASHES[0], HASHES[1]).hex() == ROOTS[2]


def test_split_is_the_largest_power_of_two_below_n_not_the_midpoint() -> None:
    expected = {2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 8: 4, 9: 8, 1000: 512, 2**40: 2**39}
    for n, k in expected.items():
        assert split_point(n) == k
    with pytest.raises(ValueError):
        split_point(1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=70))
def test_root_agrees_with_the_naive_definition(leaves: list[bytes]) -> None:
    assert root_hash([leaf_hash(leaf) for leaf in leaves]) == naive_root(leaves)


# --- inclusion -------------------------------------------------------------------------------
@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_reference_inclusion_proofs(index: int, size: int, path: list[str]) -> None:
    proof = h(path)
    assert inclusion_proof(HASHES[:size], index) == proof
    root = bytes.fromhex(ROOTS[size])
    assert verify_inclusion(HASHES[index], index, size, proof, root)


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_corrupted_inclusion_proofs_fail(index: int, size: int, path: list[str]) -> None:
    proof, root, leaf = h(path), bytes.fromhex(ROOTS[size]), HASHES[index]
    probes = [
        (leaf, index - 1, size, proof, root),
        (leaf, index + 1, size, proof, root),
        (leaf, index ^ 2, size, proof, root),
        (leaf, index, size * 2, proof, root),
        (leaf, index, size // 2, proof, root),
        (leaf_hash(b"WrongLeaf"), index, size, proof, root),
        (b"WrongLeaf", index, size, proof, root),
        (leaf, index, size, proof, EMPTY_ROOT),
        (leaf, index, size, proof, SOME_HASH),
        (leaf, index, size, proof, root[:-1]),
        (leaf, index, size, [*proof, b""], root),
        (leaf, index, size, [*proof, root], root),
        (leaf, index, size, [b"", *proof], root),
        (leaf, index, size, [root, *proof], root),
        (leaf, index, size, proof[:-1], root),
        (leaf, index, size, [proof[0], SOME_HASH, *proof[1:]], root),
    ]
    probes += [(leaf, index, size, flip(proof, i), root) for i in range(len(proof))]
    probes += [(leaf, index, size, flip(proof, i, 0x80), root) for i in range(len(proof))]
    for probe in probes:
        assert not verify_inclusion(*probe), probe[1:3]


def test_inclusion_edge_cases() -> None:
    leaf = leaf_hash(b"data")
    assert verify_inclusion(leaf, 0, 1, [], leaf)
    assert not verify_inclusion(leaf, 0, 1, [], b"")
    assert not verify_inclusion(b"", 0, 1, [], leaf)
    for index, size in [(0, 0), (1, 0), (1, 1), (2, 1)]:
        assert not verify_inclusion(SOME_HASH, index, size, [], EMPTY_ROOT)
    with pytest.raises(IndexError):
        inclusion_proof(HASHES, 8)


def test_every_inclusion_proof_of_many_tree_sizes() -> None:
    hashes = [leaf_hash(bytes([i, i * 7 % 256])) for i in range(41)]
    for size in range(1, len(hashes) + 1):
        tree = hashes[:size]
        root = naive_root([bytes([i, i * 7 % 256]) for i in range(size)])
        for index in range(size):
            proof = inclusion_proof(tree, index)
            assert verify_inclusion(tree[index], index, size, proof, root)
            if size > 1:
                assert not verify_inclusion(tree[index], (index + 1) % size, size, proof, root)
                assert not verify_inclusion(tree[index], index, size, flip(proof, 0), root)


# --- consistency -----------------------------------------------------------------------------
@pytest.mark.parametrize(("old", "new", "path"), CONSISTENCY)
def test_reference_consistency_proofs(old: int, new: int, path: list[str]) -> None:
    proof = h(path)
    assert consistency_proof(HASHES[:new], old) == proof
    old_root, new_root = bytes.fromhex(ROOTS[old]), bytes.fromhex(ROOTS[new])
    assert verify_consistency(old, new, proof, old_root, new_root)


@pytest.mark.parametrize(("old", "new", "path"), CONSISTENCY)
def test_corrupted_consistency_proofs_fail(old: int, new: int, path: list[str]) -> None:
    proof = h(path)
    r1, r2 = bytes.fromhex(ROOTS[old]), bytes.fromhex(ROOTS[new])
    probes = [
        (old - 1, new, proof, r1, r2),
        (old + 1, new, proof, r1, r2),
        (old ^ 2, new, proof, r1, r2),
        (old, new * 2, proof, r1, r2),
        (old, new // 2, proof, r1, r2),
        (old, new, proof, b"WrongRoot", r2),
        (old, new, proof, r1, b"WrongRoot"),
        (old, new, proof, r2, r1),
        (old, new, [], r1, r2),
        (old, new, [*proof, b""], r1, r2),
        (old, new, [*proof, r1], r1, r2),
        (old, new, [*proof, r2], r1, r2),
        (old, new, [b"", *proof], r1, r2),
        (old, new, [r1, *proof], r1, r2),
        (old, new, [r2, *proof], r1, r2),
        (old, new, [proof[0], *proof], r1, r2),
        (old, new, proof[:-1], r1, r2),
    ]
    probes += [(old, new, flip(proof, i, 16), r1, r2) for i in range(len(proof))]
    for probe in probes:
        assert not verify_consistency(*probe), probe[:2]


def test_consistency_edge_cases() -> None:
    root1, root2 = b"don't care 1", b"don't care 2"
    assert verify_consistency(0, 0, [], root1, root1)
    assert verify_consistency(0, 1, [], root1, root2)
    assert verify_consistency(1, 1, [], root2, root2)
    assert not verify_consistency(0, 0, [], root1, root2)
    assert not verify_consistency(1, 1, [], root1, root2)
    assert not verify_consistency(1, 0, [], root1, root2)
    assert not verify_consistency(2, 1, [], root1, root2)
    assert not verify_consistency(1, 2, [], root1, root2)
    assert not verify_consistency(0, 1, [EMPTY_ROOT], EMPTY_ROOT, EMPTY_ROOT)
    assert not verify_consistency(1, 1, [EMPTY_ROOT], EMPTY_ROOT, EMPTY_ROOT)


def test_every_consistency_proof_of_many_tree_sizes() -> None:
    hashes = [leaf_hash(bytes([i])) for i in range(33)]
    for new in range(1, len(hashes) + 1):
        new_root = root_hash(hashes[:new])
        for old in range(0, new + 1):
            proof = consistency_proof(hashes[:new], old)
            assert verify_consistency(old, new, proof, root_hash(hashes[:old]), new_root)
            if 0 < old < new:
                assert not verify_consistency(
                    old, new, flip(proof, 0), root_hash(hashes[:old]), new_root
                )
