"""The transparency log: its tree, its checkpoints (never a fork) and its C2SP tiles."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtrail.audit import GENESIS_HASH, NoteSigner, seal, verify_tree_head
from runtrail.audit.merkle import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_hash,
    verify_consistency,
    verify_inclusion,
)
from runtrail.audit.store import LinkStore
from runtrail.audit.tile_store import FileTileStore
from runtrail.audit.tlog import (
    InconsistentLog,
    LogTree,
    Tile,
    index_path,
    new_tiles,
    read_entry_bundle,
    tile_path,
)
from runtrail.audit.tree_head import TreeHead
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.transparency import LogPublisher


def entry(i: int) -> bytes:
    return hashlib.sha256(f"link {i}".encode()).digest()


def tree_of(n: int) -> LogTree:
    tree = LogTree()
    tree.extend([entry(i) for i in range(n)])
    return tree


def test_the_tree_agrees_with_rfc6962_at_every_size_and_grows_in_any_steps() -> None:
    entries = [entry(i) for i in range(70)]
    leaves = [leaf_hash(e) for e in entries]
    grown = LogTree()
    for step in (1, 2, 5, 13, 49):
        grown.extend(entries[grown.size : grown.size + step])
    assert grown.size == 70 and grown.levels == tree_of(70).levels
    for size in range(71):
        assert grown.root(size) == root_hash(leaves[:size])
    for size in (1, 2, 3, 8, 33, 70):
        for index in {0, size // 2, size - 1}:
            proof = grown.inclusion_proof(index, size)
            assert proof == inclusion_proof(leaves[:size], index)
            assert verify_inclusion(leaves[index], index, size, proof, grown.root(size))
        for old in {0, 1, size // 3, size - 1, size}:
            proof = grown.consistency_proof(old, size)
            assert proof == consistency_proof(leaves[:size], old)
            assert verify_consistency(old, size, proof, grown.root(old), grown.root(size))


def test_a_checkpoint_must_extend_the_last_one_signed() -> None:
    tree = tree_of(10)
    first = tree.checkpoint("o")
    tree.extend([entry(10)])
    assert tree.checkpoint("o", first).size == 11
    forked = TreeHead("o", 10, hashlib.sha256(b"another history").digest())
    with pytest.raises(InconsistentLog, match="changed"):
        tree.checkpoint("o", forked)
    with pytest.raises(InconsistentLog, match="already signed"):
        tree.checkpoint("o", TreeHead("o", 12, first.root_hash))
    with pytest.raises(InconsistentLog, match="origin"):
        tree.checkpoint("o", TreeHead("other", 10, first.root_hash))


def test_tile_paths_are_c2sp() -> None:
    assert [index_path(n) for n in (0, 7, 999, 1000, 1234067)] == [
        "000", "007", "999", "x001/000", "x001/x234/067"
    ]  # fmt: skip
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(1, 3, 17) == "tile/1/003.p/17"
    assert tile_path(None, 2, 255) == "tile/entries/002.p/255"


def test_new_tiles_are_what_growing_adds() -> None:
    assert list(new_tiles(0, 300)) == [
        Tile(0, 0, 256), Tile(None, 0, 256), Tile(0, 1, 44), Tile(None, 1, 44), Tile(1, 0, 1)
    ]  # fmt: skip
    assert list(new_tiles(300, 301)) == [Tile(0, 1, 45), Tile(None, 1, 45)]
    assert list(new_tiles(300, 300)) == []
    assert list(new_tiles(256, 512)) == [Tile(0, 1, 256), Tile(None, 1, 256), Tile(1, 0, 2)]


def fill(store: LinkStore, runs: int, links: int) -> None:
    for r in range(runs):
        prev, batch = GENESIS_HASH, []
        for i in range(links):
            link = seal(i, prev, event(f"run-{r}", i))
            batch.append(link)
            prev = link.hash
        store.append_batch(batch, {})


def event(run: str, i: int) -> dict[str, object]:
    return {
        "eventId": f"{run}-{i}",
        "runId": run,
        "tenantId": "acme",
        "sequence": str(i + 1),
        "type": "TOOL_RESULT",
        "schemaVersion": 1,
        "occurredAt": "2024-05-01T12:00:00Z",
        "data": {"i": i},
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LinkStore]:
    opened = open_store(AUDIT_LINKS, sqlite_url(tmp_path / "audit.db"))
    yield opened
    opened.close()


def test_the_publisher_signs_consistent_checkpoints_and_writes_the_tiles(
    store: LinkStore, tmp_path: Path
) -> None:
    signer = NoteSigner("log.example/test", Ed25519PrivateKey.generate())
    tiles = FileTileStore(tmp_path / "tlog")
    publisher = LogPublisher(store, signer, "log.example/test", tiles)
    assert publisher.publish() is None  # an empty log signs nothing
    fill(store, 3, 100)
    first = publisher.publish()
    assert first is not None and first.tree_head.size == 300
    assert publisher.publish() is None  # nothing new
    note = (tmp_path / "tlog" / "checkpoint").read_text()
    assert verify_tree_head(note, signer.verifier, "log.example/test") == first.tree_head
    entries = read_entry_bundle((tmp_path / "tlog/tile/entries/001.p/44").read_bytes())
    assert entries == store.log_entries(256, 300)
    level0 = (tmp_path / "tlog/tile/0/000").read_bytes()
    assert level0[:32] == leaf_hash(store.log_entries(0, 1)[0]) and len(level0) == 256 * 32
    assert (tmp_path / "tlog/tile/1/000.p/1").read_bytes() == publisher.tree.root(256)

    prev, batch = GENESIS_HASH, []
    for i in range(5):
        link = seal(i, prev, event("run-late", i))
        batch.append(link)
        prev = link.hash
    store.append_batch(batch, {})
    # a new publisher (a restart) reads the tree back from the store and the tiles it wrote
    again = LogPublisher(store, signer, "log.example/test", tiles)
    second = again.publish()
    assert second is not None and second.tree_head.size == 305
    assert (tmp_path / "tlog/tile/0/001.p/49").exists()
    assert not (tmp_path / "tlog/tile/0/001.p/45").exists()  # never written: the old size was 300
    assert (
        verify_tree_head((tmp_path / "tlog" / "checkpoint").read_text(), signer.verifier)
        == second.tree_head
    )


def test_the_publisher_refuses_to_sign_a_fork(store: LinkStore, tmp_path: Path) -> None:
    """A signed checkpoint the store's leaves do not extend (the log was rewritten, or two
    writers diverged): the publisher stops and signs nothing."""
    signer = NoteSigner("log.example/test", Ed25519PrivateKey.generate())
    fill(store, 1, 4)
    other = TreeHead("log.example/test", 3, hashlib.sha256(b"elsewhere").digest())
    from runtrail.audit.note import sign_note

    store.save_log_checkpoint(sign_note(other.body(), signer), other)
    publisher = LogPublisher(store, signer, "log.example/test", FileTileStore(tmp_path / "t"))
    with pytest.raises(InconsistentLog):
        publisher.publish()
    latest = store.latest_log_checkpoint()
    assert latest is not None and latest.tree_head == other
    assert not (tmp_path / "t" / "checkpoint").exists()


def test_tiles_go_to_object_storage_through_the_persistence_layer(
    store: LinkStore, s3_url: str
) -> None:
    """The same publisher on an S3 bucket (moto): the objects, and a restart that finds them."""
    from runtrail.persistence.kinds import AUDIT_TILES

    signer = NoteSigner("log.example/s3", Ed25519PrivateKey.generate())
    tiles = open_store(AUDIT_TILES, s3_url)
    fill(store, 2, 150)
    first = LogPublisher(store, signer, "log.example/s3", tiles).publish()
    assert first is not None and first.tree_head.size == 300
    note = tiles.get("checkpoint")
    assert note is not None and verify_tree_head(note.decode(), signer.verifier) == first.tree_head
    assert read_entry_bundle(tiles.get("tile/entries/001.p/44") or b"") == store.log_entries(
        256, 300
    )
    assert tiles.get("tile/0/002") is None
    prev, batch = GENESIS_HASH, []
    for i in range(3):
        link = seal(i, prev, event("run-s3", i))
        batch.append(link)
        prev = link.hash
    store.append_batch(batch, {})
    second = LogPublisher(store, signer, "log.example/s3", tiles).publish()
    assert second is not None and second.tree_head.size == 303
    assert tiles.get("tile/0/001.p/47") is not None


def test_the_tile_folder_is_private_unless_asked_to_be_public(tmp_path: Path) -> None:
    """Every store in the state folder is private (the audit API serves the objects); a folder
    a web server reads directly says ``?public=true``."""
    old = os.umask(0)
    try:
        private = FileTileStore.from_url((tmp_path / "private" / "tlog").as_uri())
        private.put_all([("tile/0/000", b"x" * 32)])
        private.put("checkpoint", b"note")
        public = FileTileStore.from_url((tmp_path / "public").as_uri() + "?public=true")
        public.put_all([("tile/0/000", b"x" * 32)])
    finally:
        os.umask(old)
    modes = {
        p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in tmp_path.rglob("*")
    }
    assert modes == {
        "private": 0o700,
        "private/tlog": 0o700,
        "private/tlog/tile": 0o700,
        "private/tlog/tile/0": 0o700,
        "private/tlog/tile/0/000": 0o600,
        "private/tlog/checkpoint": 0o600,
        "public": 0o755,
        "public/tile": 0o755,
        "public/tile/0": 0o755,
        "public/tile/0/000": 0o644,
    }
    with pytest.raises(ValueError, match="unknown tile store option"):
        FileTileStore.from_url((tmp_path / "x").as_uri() + "?publik=1")
