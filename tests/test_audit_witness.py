"""The log's checkpoints cosigned by a real, independent witness: transparency-dev's
omniwitness (Go, built by tests/go_tools.py), on 127.0.0.1, with runtrail's log in its
configuration. It checks every consistency proof runtrail sends with its own code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtrail.audit import GENESIS_HASH, NoteSigner, seal
from runtrail.audit.cosignature import witnessed_by
from runtrail.audit.note import sign_note
from runtrail.audit.store import LinkStore
from runtrail.audit.tile_store import FileTileStore
from runtrail.audit.tree_head import TreeHead
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.transparency import LogPublisher
from runtrail_services.audit.witnessing import Witness, WitnessClient
from tests.witness_support import Omniwitness, omniwitness

ORIGIN = "runtrail.test/witnessed-log"


def extend(store: LinkStore, run: str, count: int) -> None:
    head = store.head("acme", run)
    index, prev = (0, GENESIS_HASH) if head is None else (head.length, head.hash)
    batch = []
    for i in range(index, index + count):
        event = {"eventId": f"{run}-{i}", "runId": run, "tenantId": "acme", "data": {"i": i}}
        link = seal(i, prev, event)
        batch.append(link)
        prev = link.hash
    store.append_batch(batch, {})


@pytest.fixture
def log_signer() -> NoteSigner:
    return NoteSigner(ORIGIN, Ed25519PrivateKey.generate())


@pytest.fixture
def witness(tmp_path: Path, log_signer: NoteSigner) -> Iterator[Omniwitness]:
    with omniwitness(tmp_path, ORIGIN, log_signer.verifier.vkey()) as started:
        yield started


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LinkStore]:
    opened = open_store(AUDIT_LINKS, sqlite_url(tmp_path / "audit.db"))
    yield opened
    opened.close()


def publisher(
    store: LinkStore, signer: NoteSigner, witness: Omniwitness, tiles: Path
) -> LogPublisher:
    client = WitnessClient([Witness(witness.url, witness.verifier)])
    return LogPublisher(store, signer, ORIGIN, FileTileStore(tiles), client, quorum=1)


def test_omniwitness_cosigns_each_consistent_checkpoint_and_refuses_forks(
    store: LinkStore, log_signer: NoteSigner, witness: Omniwitness, tmp_path: Path
) -> None:
    extend(store, "run-1", 40)
    first = publisher(store, log_signer, witness, tmp_path / "tlog")
    stored = first.publish()
    assert stored is not None and first.witnessed(stored)
    published = (tmp_path / "tlog" / "checkpoint").read_text()
    assert set(witnessed_by(published, [witness.verifier])) == {"witness.test/w1"}

    extend(store, "run-2", 300)  # the witness checks the consistency proof from 40 to 340
    grown = first.publish()
    assert grown is not None and grown.tree_head.size == 340 and first.witnessed(grown)

    # a restart: the new client assumes the witness holds nothing, is told 340 (409), and
    # proves consistency from there
    extend(store, "run-1", 5)
    again = publisher(store, log_signer, witness, tmp_path / "tlog")
    third = again.publish()
    assert third is not None and again.witnessed(third)
    published = (tmp_path / "tlog" / "checkpoint").read_text()
    assert witnessed_by(published, [witness.verifier])

    # a fork: another tree of the same size, signed with the log's own key — refused (its
    # proof cannot show it extends what the witness holds)
    forged = TreeHead(ORIGIN, 345, b"\x07" * 32)
    status, _ = witness.post(f"old 345\n\n{sign_note(forged.body(), log_signer)}")
    assert status == 422
    # a rollback: an older, smaller checkpoint the log really signed — refused
    status, answer = witness.post(f"old 0\n\n{grown.note}")
    assert status == 409 and answer.strip() == "345"
    # runtrail's own client never sends either: nothing cosigned, nothing kept
    client = WitnessClient([Witness(witness.url, witness.verifier)])
    assert client.cosign(sign_note(forged.body(), log_signer), forged, lambda old: []) == {}
