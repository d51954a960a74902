"""Signed notes, signed tree heads over run heads, and chains held to a trusted tree head."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtrail.audit import (
    HashChainedEventLog,
    HeadProof,
    NoteError,
    NoteSigner,
    NoteVerifier,
    RunHead,
    TreeHead,
    find_fork,
    head_leaf,
    prove_head,
    read_export,
    sign_tree_head,
    verify_against_tree_head,
    verify_against_tree_heads,
    verify_head_proof,
    verify_tree_head,
    write_export,
)
from runtrail.audit.keys import (
    generate_private_key,
    load_private_key,
    load_public_key,
    load_signer,
    load_verifier,
    write_private_key,
    write_public_key,
)
from runtrail.audit.merkle import leaf_hash, node_hash
from runtrail.audit.note import key_id, open_note, sign_note

# golang.org/x/mod/sumdb/note's published example: a different implementation's signed note,
# reproduced byte for byte (Ed25519 is deterministic).
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT + "\n— PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ORIGIN = "audit.example/test-log"


def event(seq: int, tenant: str = "acme", run: str = "run-1", text: str = "") -> dict[str, Any]:
    return {
        "eventId": f"{tenant}/{run}/{seq}",
        "runId": run,
        "tenantId": tenant,
        "sequence": str(seq),
        "type": "STEP_END",
        "schemaVersion": 1,
        "occurredAt": "2024-05-01T12:00:00Z",
        "actor": {"kind": "agent", "id": "a"},
        "correlationId": "c",
        "data": {"note": text or f"step {seq}"},
    }


def chain(n: int, tenant: str = "acme", run: str = "run-1") -> HashChainedEventLog:
    log = HashChainedEventLog()
    for seq in range(1, n + 1):
        log.append(event(seq, tenant, run))
    return log


@pytest.fixture
def signer() -> NoteSigner:
    return NoteSigner(ORIGIN, Ed25519PrivateKey.generate())


def runs() -> dict[tuple[str, str], HashChainedEventLog]:
    return {
        ("acme", "run-1"): chain(6),
        ("acme", "run-2"): chain(2, run="run-2"),
        ("globex", "run-1"): chain(4, tenant="globex"),
        ("initech", "z"): chain(1, tenant="initech", run="z"),
        ("acme", "run-0"): chain(3, run="run-0"),
    }


def heads(logs: dict[tuple[str, str], HashChainedEventLog]) -> list[RunHead]:
    out = []
    for log in logs.values():
        head = log.head()
        assert head is not None
        out.append(head)
    return out


# --- signed notes ----------------------------------------------------------------------------
def test_go_reference_note_is_reproduced_and_opened() -> None:
    signer = NoteSigner.from_skey(GO_SKEY)
    assert sign_note(GO_TEXT, signer) == GO_NOTE
    verifier = NoteVerifier.from_vkey(GO_VKEY)
    assert open_note(GO_NOTE, verifier) == GO_TEXT
    assert signer.verifier.vkey() == GO_VKEY
    assert signer.skey() == GO_SKEY


def test_key_id_is_sha256_of_name_newline_type_and_key() -> None:
    verifier = NoteVerifier.from_vkey(GO_VKEY)
    raw = base64.b64decode(GO_VKEY.split("+", 2)[2])[1:]
    expected = hashlib.sha256(b"PeterNeumann\n\x01" + raw).digest()[:4]
    assert key_id("PeterNeumann", raw) == expected == bytes.fromhex("c74f20a3")
    assert verifier.key_id == expected


def test_altered_note_text_or_signature_is_rejected() -> None:
    verifier = NoteVerifier.from_vkey(GO_VKEY)
    with pytest.raises(NoteError):
        open_note(GO_NOTE.replace("cryptography", "cryptographY"), verifier)
    sig = GO_NOTE.rsplit(" ", 1)[1].strip()
    blob = bytearray(base64.b64decode(sig))
    blob[10] ^= 1
    with pytest.raises(NoteError):
        open_note(GO_NOTE.replace(sig, base64.b64encode(bytes(blob)).decode()), verifier)


def test_unknown_keys_are_ignored_but_one_is_needed() -> None:
    stranger = NoteVerifier("PeterNeumann", Ed25519PrivateKey.generate().public_key())
    with pytest.raises(NoteError, match="no signature by a trusted key"):
        open_note(GO_NOTE, stranger)
    # A second signature by an unknown key does not stop the trusted one from counting.
    other = NoteSigner("someone.else", Ed25519PrivateKey.generate())
    cosigned = GO_NOTE + other.signature_line(GO_TEXT.encode())
    assert open_note(cosigned, NoteVerifier.from_vkey(GO_VKEY)) == GO_TEXT


@pytest.mark.parametrize(
    "bad",
    [
        GO_TEXT,  # no signatures
        GO_TEXT + "\n",  # blank line, still no signatures
        GO_NOTE.replace("— ", "- "),  # not an em dash
        GO_NOTE[:-1],  # no final newline
        GO_NOTE.replace("x08go", "x08go!"),  # not base64
        GO_NOTE.replace("\n\n", "\n\x01\n"),  # control character
    ],
)
def test_malformed_notes_are_rejected(bad: str) -> None:
    with pytest.raises(NoteError):
        open_note(bad, NoteVerifier.from_vkey(GO_VKEY))


def test_key_names_and_key_strings_are_checked() -> None:
    key = Ed25519PrivateKey.generate()
    for name in ("", "has space", "a+b"):
        with pytest.raises(NoteError):
            NoteSigner(name, key)
    with pytest.raises(NoteError):
        NoteVerifier.from_vkey(GO_VKEY.replace("c74f20a3", "c74f20a4"))
    with pytest.raises(NoteError):
        NoteSigner.from_skey(GO_SKEY.replace("PeterNeumann", "PeterNeumann2"))


# --- tree heads -----------------------------------------------------------------------------
def test_checkpoint_body_format(signer: NoteSigner) -> None:
    logs = runs()
    note = sign_tree_head(heads(logs), signer, ORIGIN)
    body, _, signature = note.partition("\n\n")
    origin, size, root = body.split("\n")
    assert (origin, size) == (ORIGIN, "5")
    assert len(base64.b64decode(root, validate=True)) == 32
    assert signature.startswith(f"— {ORIGIN} ") and signature.endswith("\n")
    tree_head = verify_tree_head(note, signer.verifier, ORIGIN)
    assert tree_head == TreeHead(ORIGIN, 5, base64.b64decode(root))


def test_checkpoint_root_is_the_rfc6962_root_of_sorted_head_leaves(signer: NoteSigner) -> None:
    hs = [
        RunHead("b", "r", 1, "1" * 64),
        RunHead("a", "r2", 2, "2" * 64),
        RunHead("a", "r1", 3, "3" * 64),
    ]
    leaves = [
        b'{"hash":"' + b"3" * 64 + b'","length":3,"runId":"r1","tenantId":"a"}',
        b'{"hash":"' + b"2" * 64 + b'","length":2,"runId":"r2","tenantId":"a"}',
        b'{"hash":"' + b"1" * 64 + b'","length":1,"runId":"r","tenantId":"b"}',
    ]
    assert [head_leaf(x) for x in sorted(hs, key=lambda x: (x.tenant_id, x.run_id))] == leaves
    lh = [hashlib.sha256(b"\x00" + leaf).digest() for leaf in leaves]
    root = hashlib.sha256(
        b"\x01" + hashlib.sha256(b"\x01" + lh[0] + lh[1]).digest() + lh[2]
    ).digest()
    tree_head = verify_tree_head(sign_tree_head(hs, signer, ORIGIN), signer.verifier)
    assert tree_head.root_hash == root
    assert node_hash(node_hash(lh[0], lh[1]), lh[2]) == root


def test_checkpoint_of_no_runs(signer: NoteSigner) -> None:
    tree_head = verify_tree_head(sign_tree_head([], signer, ORIGIN), signer.verifier)
    assert (tree_head.size, tree_head.root_hash) == (0, hashlib.sha256(b"").digest())


def test_two_heads_for_one_run_are_refused(signer: NoteSigner) -> None:
    with pytest.raises(ValueError):
        sign_tree_head([RunHead("a", "r", 1, "1" * 64), RunHead("a", "r", 2, "2" * 64)], signer)


def test_checkpoint_verification_failures(signer: NoteSigner) -> None:
    note = sign_tree_head(heads(runs()), signer, ORIGIN)
    with pytest.raises(NoteError):
        verify_tree_head(note, NoteVerifier(ORIGIN, Ed25519PrivateKey.generate().public_key()))
    with pytest.raises(NoteError):
        verify_tree_head(note, signer.verifier, origin="another.example/log")
    with pytest.raises(NoteError):
        verify_tree_head(note.replace(f"{ORIGIN}\n5\n", f"{ORIGIN}\n4\n"), signer.verifier)
    for body in (
        "o\n05\n" + "A" * 43 + "=\n",
        "o\n1\nshort\n",
        "o\n1\n",
        "\n1\n" + "A" * 43 + "=\n",
    ):
        with pytest.raises(NoteError):
            TreeHead.parse(body)


def test_head_proofs_verify_and_round_trip(signer: NoteSigner) -> None:
    logs = runs()
    hs = heads(logs)
    tree_head = verify_tree_head(sign_tree_head(hs, signer, ORIGIN), signer.verifier)
    for tenant, run in logs:
        proof = prove_head(hs, tenant, run)
        assert verify_head_proof(proof, tree_head)
        again = HeadProof.from_json(json.loads(json.dumps(proof.to_json())))
        assert again == proof
    with pytest.raises(KeyError):
        prove_head(hs, "acme", "nope")


def test_corrupted_head_proofs_fail(signer: NoteSigner) -> None:
    hs = heads(runs())
    tree_head = verify_tree_head(sign_tree_head(hs, signer, ORIGIN), signer.verifier)
    proof = prove_head(hs, "acme", "run-1")
    head = proof.head
    flipped = (bytes([proof.proof[0][0] ^ 1]) + proof.proof[0][1:], *proof.proof[1:])
    rest = (proof.leaf_index, proof.tree_size, proof.proof)
    bad = [
        HeadProof(RunHead(head.tenant_id, head.run_id, head.length - 1, head.hash), *rest),
        HeadProof(RunHead(head.tenant_id, head.run_id, head.length, "0" * 64), *rest),
        HeadProof(RunHead("globex", head.run_id, head.length, head.hash), *rest),
        HeadProof(head, proof.leaf_index + 1, proof.tree_size, proof.proof),
        HeadProof(head, proof.leaf_index, proof.tree_size + 1, proof.proof),
        HeadProof(head, proof.leaf_index, proof.tree_size, flipped),
        HeadProof(head, proof.leaf_index, proof.tree_size, proof.proof[:-1]),
    ]
    for probe in bad:
        assert not verify_head_proof(probe, tree_head)
    other = TreeHead(ORIGIN, tree_head.size, leaf_hash(b"other"))
    assert not verify_head_proof(proof, other)


# --- holding a chain to a tree head ---------------------------------------------------------
@pytest.fixture
def anchored(signer: NoteSigner) -> tuple[HashChainedEventLog, TreeHead, HeadProof]:
    logs = runs()
    hs = heads(logs)
    tree_head = verify_tree_head(sign_tree_head(hs, signer, ORIGIN), signer.verifier, ORIGIN)
    return logs[("acme", "run-1")], tree_head, prove_head(hs, "acme", "run-1")


def test_intact_chain_and_a_grown_chain_pass(
    anchored: tuple[HashChainedEventLog, TreeHead, HeadProof],
) -> None:
    log, tree_head, proof = anchored
    assert verify_against_tree_head(log.links, tree_head, proof).valid
    log.append(event(7))
    log.append(event(8))
    result = verify_against_tree_head(log.links, tree_head, proof)
    assert result.valid and result.length == 8


def test_truncated_tail_is_detected(
    anchored: tuple[HashChainedEventLog, TreeHead, HeadProof],
) -> None:
    log, tree_head, proof = anchored
    cut = log.links[:4]
    assert HashChainedEventLog().load_links(cut).valid  # fine on its own
    result = verify_against_tree_head(cut, tree_head, proof)
    assert result.to_json() == {
        "valid": False,
        "length": 4,
        "firstBrokenIndex": 4,
        "reason": "truncated",
    }
    assert verify_against_tree_head([], tree_head, proof).reason == "truncated"


def test_fully_resealed_rewrite_is_detected(
    anchored: tuple[HashChainedEventLog, TreeHead, HeadProof],
) -> None:
    log, tree_head, proof = anchored
    forged = HashChainedEventLog()
    forged.restore(
        [event(seq, text="rewritten") if seq == 2 else event(seq) for seq in range(1, 7)]
    )
    assert forged.verify_chain().valid  # every hash recomputed: the chain alone is fine
    assert forged.links[0] == log.links[0] and forged.links[1].hash != log.links[1].hash
    result = verify_against_tree_head(forged.links, tree_head, proof)
    assert (result.valid, result.first_broken_index, result.reason) == (False, 5, "rewritten")
    # Rewritten and extended past the tree head: still caught at the committed index.
    forged.append(event(7))
    assert verify_against_tree_head(forged.links, tree_head, proof).reason == "rewritten"


def test_a_chain_tampered_without_resealing_reports_its_own_break(
    anchored: tuple[HashChainedEventLog, TreeHead, HeadProof],
) -> None:
    log, tree_head, proof = anchored
    links = list(log.links)
    del links[1]
    result = verify_against_tree_head(links, tree_head, proof)
    assert (result.first_broken_index, result.reason) == (1, "prevHash mismatch")


def test_another_runs_chain_or_a_bad_proof_does_not_pass(
    anchored: tuple[HashChainedEventLog, TreeHead, HeadProof],
) -> None:
    _, tree_head, proof = anchored
    stranger = chain(6, tenant="globex", run="run-1")
    assert verify_against_tree_head(stranger.links, tree_head, proof).reason == "run mismatch"
    forged_proof = HeadProof(
        RunHead("acme", "run-1", 2, chain(2).links[-1].hash),
        proof.leaf_index,
        proof.tree_size,
        proof.proof,
    )
    result = verify_against_tree_head(chain(2).links, tree_head, forged_proof)
    assert result.reason == "head not in checkpoint"


def test_a_proof_held_to_a_later_tree_head_says_which_tree_head_it_needs(
    anchored: tuple[HashChainedEventLog, TreeHead, HeadProof], signer: NoteSigner
) -> None:
    """Following the docs with a fresh ``audit tree-head`` beside an older ``audit prove``
    answered only "inclusion proof does not verify", which reads as tampering: the proof
    answers for the tree head it was made against, and the verdict says so."""
    log, _, proof = anchored
    grown = runs()
    grown[("acme", "run-9")] = chain(1, run="run-9")
    later = verify_tree_head(sign_tree_head(heads(grown), signer, ORIGIN), signer.verifier)
    result = verify_against_tree_head(log.links, later, proof)
    assert (result.valid, result.reason) == (False, "head not in checkpoint")
    assert result.detail is not None
    assert f"a tree head of {proof.tree_size} run heads" in result.detail
    assert f"this tree head has {later.size}" in result.detail


def test_against_several_checkpoints(signer: NoteSigner) -> None:
    log = chain(3)
    anchors = []
    for seq in range(4, 7):
        head = log.head()
        assert head is not None
        cp = verify_tree_head(sign_tree_head([head], signer, ORIGIN), signer.verifier)
        anchors.append((cp, prove_head([head], "acme", "run-1")))
        log.append(event(seq))
    assert verify_against_tree_heads(log.links, anchors).valid
    assert verify_against_tree_heads(log.links[:4], anchors).reason == "truncated"


def test_export_held_to_a_checkpoint(
    tmp_path: Path, anchored: tuple[HashChainedEventLog, TreeHead, HeadProof]
) -> None:
    log, tree_head, proof = anchored
    path = tmp_path / "links.jsonl"
    write_export(path, log.links[:5])
    assert verify_against_tree_head(read_export(path), tree_head, proof).reason == "truncated"
    write_export(path, log.links)
    assert verify_against_tree_head(read_export(path), tree_head, proof).valid


# --- forks -----------------------------------------------------------------------------------
def test_fork_two_heads_at_one_length(signer: NoteSigner) -> None:
    honest, forked = chain(4), HashChainedEventLog()
    forked.restore([event(1), event(2), event(3, text="other branch"), event(4)])
    shown_to_a, shown_to_b = honest.head(), forked.head()
    assert shown_to_a is not None and shown_to_b is not None
    others = heads({k: v for k, v in runs().items() if k != ("acme", "run-1")})
    note_a = sign_tree_head([shown_to_a, *others], signer, ORIGIN)
    note_b = sign_tree_head([shown_to_b, *others], signer, ORIGIN)
    cp_a = verify_tree_head(note_a, signer.verifier)
    cp_b = verify_tree_head(note_b, signer.verifier)
    proof_a = prove_head([shown_to_a, *others], "acme", "run-1")
    proof_b = prove_head([shown_to_b, *others], "acme", "run-1")
    evidence = find_fork((cp_a, proof_a), (cp_b, proof_b))
    assert evidence is not None and evidence.reason == "fork"
    assert (evidence.tenant_id, evidence.run_id) == ("acme", "run-1")
    # Each reader's chain also fails against the other's tree head.
    assert verify_against_tree_head(honest.links, cp_b, proof_b).reason == "rewritten"
    assert verify_against_tree_head(forked.links, cp_a, proof_a).reason == "rewritten"


def test_fork_two_heads_of_one_run_in_one_tree(signer: NoteSigner) -> None:
    # A dishonest log can build a tree holding two leaves for one run; the two proofs against
    # one signed root are the evidence.
    short, long = chain(2).head(), chain(5).head()
    assert short is not None and long is not None
    leaves = [leaf_hash(head_leaf(short)), leaf_hash(head_leaf(long))]
    tree_head = TreeHead(ORIGIN, 2, node_hash(*leaves))
    proof_short = HeadProof(short, 0, 2, (leaves[1],))
    proof_long = HeadProof(long, 1, 2, (leaves[0],))
    evidence = find_fork((tree_head, proof_short), (tree_head, proof_long))
    assert evidence is not None


def test_no_fork_between_consistent_heads(signer: NoteSigner) -> None:
    log = chain(2)
    early = log.head()
    log.append(event(3))
    late = log.head()
    assert early is not None and late is not None
    cp1 = verify_tree_head(sign_tree_head([early], signer), signer.verifier)
    cp2 = verify_tree_head(sign_tree_head([late], signer), signer.verifier)
    p1, p2 = prove_head([early], "acme", "run-1"), prove_head([late], "acme", "run-1")
    assert find_fork((cp1, p1), (cp2, p2)) is None
    assert find_fork((cp1, p1), (cp1, p1)) is None
    assert find_fork((cp1, p2), (cp2, p2)) is None  # a proof that does not verify is no evidence


# --- keys ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["pem", "raw"])
def test_key_files_round_trip(tmp_path: Path, fmt: str) -> None:
    key = generate_private_key()
    private, public = tmp_path / "signing.key", tmp_path / "signing.pub"
    write_private_key(private, key, fmt)  # type: ignore[arg-type]
    write_public_key(public, key.public_key(), fmt)  # type: ignore[arg-type]
    assert os.stat(private).st_mode & 0o777 == 0o600
    if fmt == "raw":
        assert len(private.read_bytes()) == 32 and len(public.read_bytes()) == 32
    else:
        assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    signer, verifier = load_signer(private, ORIGIN), load_verifier(public, ORIGIN)
    assert verifier.vkey() == signer.verifier.vkey()
    assert load_private_key(private).public_key() == load_public_key(public)
    note = sign_tree_head([], signer)
    verify_tree_head(note, verifier)
    with pytest.raises(FileExistsError):
        write_private_key(private, generate_private_key(), fmt)  # type: ignore[arg-type]


def test_key_files_of_the_wrong_kind_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.key"
    path.write_bytes(b"x" * 31)
    with pytest.raises(NoteError):
        load_private_key(path)
    with pytest.raises(NoteError):
        load_public_key(path)
