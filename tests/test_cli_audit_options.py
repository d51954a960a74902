"""Options of ``runtrail audit`` no other test gives: ``keygen --format raw``, ``log-prove
--index`` and ``--size``, ``log-consistency --new``, ``--origin`` and ``--log-origin``.

Each proof the CLI hands out is checked by verifiers that share no code with it: Go's
``golang.org/x/mod/sumdb`` (``tools/tlogverify``, run over a copy of the tile folder taken
right after each checkpoint was signed, as a mirror would have kept it) makes its own proof
for the same tree, and runtrail's standalone verifier (``tools/verify_audit_log.py``) checks
the signed note and the proof of the link's hash against the signed root.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtrail.audit.tree_head import DEFAULT_LOG_ORIGIN, DEFAULT_ORIGIN
from runtrail_tools.cli.main import main
from tests.test_audit_tlog_go import Log, extend, tlogverify

ROOT = Path(__file__).resolve().parents[1]


def _standalone_verifier() -> ModuleType:
    """tools/verify_audit_log.py, the auditor's script (no runtrail import), as a module."""
    spec = importlib.util.spec_from_file_location(
        "verify_audit_log", ROOT / "tools" / "verify_audit_log.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AUDITOR = _standalone_verifier()


@pytest.fixture
def log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    opened = Log(tmp_path, capsys)
    yield opened
    opened.store.close()


class Signed:
    """Log checkpoints signed through the CLI, each with a copy of the tile folder as it was
    right after it was signed (what a mirror kept), and its note."""

    def __init__(self, log: Log, tmp_path: Path) -> None:
        self.log = log
        self.tmp_path = tmp_path
        self.mirrors: dict[int, Path] = {}
        self.notes: dict[int, Path] = {}
        self.vkey = ""

    def sign(self, *args: str) -> dict[str, Any]:
        code, summary = self.log.cli("log-checkpoint", *args)
        assert code == 0 and summary["signed"], summary
        size = int(summary["size"])
        self.vkey = summary["verifierKey"]
        self.mirrors[size] = self.tmp_path / f"mirror-{size}"
        shutil.copytree(self.log.tiles, self.mirrors[size])
        self.notes[size] = self.tmp_path / f"checkpoint-{size}.note"
        self.notes[size].write_text(summary["note"], "utf-8")
        return dict(summary)

    def go(self, size: int, *args: str) -> dict[str, Any]:
        """Go's reading of the log as it was at ``size`` leaves."""
        code, out, err = tlogverify("-log", str(self.mirrors[size]), "-vkey", self.vkey, *args)
        assert code == 0, err
        assert out["size"] == size
        return dict(out)


def cli_error(log: Log, *args: str) -> tuple[int, str]:
    """``runtrail audit ARGS`` on the log's store: (exit status, stderr)."""
    log.capsys.readouterr()
    argv = ["audit", *args, "--store", log.url, "--state-dir", str(log.state)]
    code = main([*argv, "--tiles", log.tiles.as_uri()])
    return code, log.capsys.readouterr().err


def link_hash(log: Log, run: str, index: int) -> str:
    """The stored hash of link ``index`` of ``run`` (hex), read from the chain itself."""
    chain = log.store.load_chain("acme", run)
    assert chain[index].index == index
    return str(chain[index].hash)


def included_in_signed_root(proof: dict[str, Any], entry_hex: str, vkey: str) -> bool:
    """The standalone verifier's answer: the checkpoint in the proof is signed by ``vkey`` and
    its root holds ``entry_hex`` at the proof's leaf index."""
    _, size, root = AUDITOR.open_checkpoint(proof["checkpoint"], vkey)
    assert size == proof["treeSize"]
    leaf = hashlib.sha256(b"\x00" + bytes.fromhex(entry_hex)).digest()
    path = [base64.b64decode(node) for node in proof["proof"]]
    return bool(AUDITOR.included(leaf, proof["leafIndex"], size, path, root))


def test_log_prove_index_proves_the_link_asked_for_not_the_runs_last(
    log: Log, tmp_path: Path
) -> None:
    """``--index I`` proves link I of the run. Ignored, the CLI proves the run's last link
    instead: an auditor asking whether one disputed event is logged gets a proof about another
    one, which verifies and so looks like an answer."""
    extend(log.store, "run-a", 40)
    extend(log.store, "run-b", 30)
    extend(log.store, "run-a", 20)  # run-a's links are not one run of leaves
    signed = Signed(log, tmp_path)
    signed.sign()

    code, proof = log.cli("log-prove", "--run", "run-a", "--index", "7")
    assert code == 0, proof
    wanted = link_hash(log, "run-a", 7)
    assert proof["link"] == {"tenantId": "acme", "runId": "run-a", "index": 7, "hash": wanted}
    assert proof["entry"] == wanted and proof["treeSize"] == 90
    assert included_in_signed_root(proof, wanted, signed.vkey)
    go = signed.go(90, "-leaf", str(proof["leafIndex"]))
    assert go["inclusion"] == {"leafIndex": proof["leafIndex"], "proof": proof["proof"]}
    # a link of run-a past the first 40 leaves is found where it is, among run-b's
    code, later = log.cli("log-prove", "--run", "run-a", "--index", "45")
    assert code == 0 and later["leafIndex"] == 75
    assert included_in_signed_root(later, link_hash(log, "run-a", 45), signed.vkey)
    code, _ = log.cli("log-prove", "--run", "run-a", "--index", "60")  # no such link
    assert code == 1


def test_log_prove_size_proves_in_that_older_signed_checkpoint(log: Log, tmp_path: Path) -> None:
    """``--size N`` proves the link in the checkpoint of N leaves the auditor already holds.
    Ignored, the proof is against the latest checkpoint: it does not verify against the
    root the auditor kept, and a mirror frozen at N cannot check it."""
    extend(log.store, "run-a", 20)
    extend(log.store, "run-b", 10)
    signed = Signed(log, tmp_path)
    signed.sign()
    extend(log.store, "run-b", 40)
    extend(log.store, "run-c", 30)
    signed.sign()

    code, proof = log.cli("log-prove", "--run", "run-a", "--size", "30")
    assert code == 0, proof
    assert (proof["treeSize"], proof["leafIndex"], proof["link"]["index"]) == (30, 19, 19)
    assert proof["checkpoint"] == signed.notes[30].read_text("utf-8")
    assert included_in_signed_root(proof, link_hash(log, "run-a", 19), signed.vkey)
    go = signed.go(30, "-leaf", "19")
    assert go["inclusion"] == {"leafIndex": 19, "proof": proof["proof"]}
    latest = log.cli("log-prove", "--run", "run-a")[1]
    assert latest["treeSize"] == 100 and latest["proof"] != proof["proof"]
    # a link the old checkpoint does not hold, or a size never signed: nothing to prove
    assert log.cli("log-prove", "--run", "run-b", "--index", "20", "--size", "30")[0] == 1
    assert log.cli("log-prove", "--run", "run-a", "--size", "31")[0] == 1


def test_log_consistency_new_proves_up_to_that_checkpoint_not_the_latest(
    log: Log, tmp_path: Path
) -> None:
    """``--new N`` proves checkpoint M a prefix of checkpoint N. Ignored, the proof runs to
    the latest: an auditor holding the checkpoint of N (a witness, a mirror) cannot check it,
    and the answer names a size they did not ask about."""
    signed = Signed(log, tmp_path)
    extend(log.store, "run-a", 30)
    signed.sign()
    extend(log.store, "run-b", 40)
    signed.sign()
    extend(log.store, "run-a", 30)
    signed.sign()

    code, proof = log.cli("log-consistency", "--old", "30", "--new", "70")
    assert code == 0, proof
    assert (proof["oldSize"], proof["newSize"]) == (30, 70)
    assert proof["checkpoint"] == signed.notes[70].read_text("utf-8")
    assert proof["oldCheckpoint"] == signed.notes[30].read_text("utf-8")
    assert AUDITOR.open_checkpoint(proof["checkpoint"], signed.vkey)[1] == 70
    go = signed.go(70, "-old", str(signed.notes[30]))
    assert go["consistency"] == {"oldSize": 30, "proof": proof["proof"]}
    latest = log.cli("log-consistency", "--old", "30")[1]
    assert latest["newSize"] == 100 and latest["proof"] != proof["proof"]
    assert signed.go(100, "-old", str(signed.notes[30]))["consistency"]["proof"] == latest["proof"]
    # a size never signed, or older than --old: refused, not proved against something else
    assert log.cli("log-consistency", "--old", "30", "--new", "71")[0] == 1
    assert log.cli("log-consistency", "--old", "70", "--new", "30")[0] == 1


def test_log_origin_names_the_logs_checkpoints_and_is_held_to(log: Log, tmp_path: Path) -> None:
    """``--log-origin`` is the origin line of the log's checkpoints, which verifiers pin (Go's
    ``-origin``). Ignored, the log is signed under the default origin: every verifier pinned
    to the operator's origin rejects it. Once signed, the log keeps that origin: signing the
    same log under another is refused (one tree per origin), not a second history."""
    origin = "audit.example.com/log"
    extend(log.store, "run-a", 12)
    signed = Signed(log, tmp_path)
    summary = signed.sign("--log-origin", origin)
    assert summary["origin"] == origin
    assert AUDITOR.open_checkpoint(summary["note"], signed.vkey)[0] == origin
    assert signed.go(12, "-origin", origin)["origin"] == origin
    assert tlogverify("-log", str(log.tiles), "-vkey", signed.vkey, "-origin", DEFAULT_LOG_ORIGIN)[
        0
    ] == 1  # fmt: skip
    code, proof = log.cli("log-prove", "--run", "run-a")
    assert code == 0 and AUDITOR.open_checkpoint(proof["checkpoint"], signed.vkey)[0] == origin

    extend(log.store, "run-a", 3)
    code, err = cli_error(log, "log-checkpoint")  # the default origin: another tree, refused
    assert code == 2 and origin in err and DEFAULT_LOG_ORIGIN in err
    assert log.store.latest_log_checkpoint().tree_head.size == 12  # type: ignore[union-attr]
    assert signed.sign("--log-origin", origin)["size"] == 15


def test_origin_names_the_signed_tree_heads(log: Log, tmp_path: Path) -> None:
    """``--origin`` is the origin line of the run heads' signed tree heads. Ignored, they
    carry the default origin: a verifier pinned to the operator's origin rejects them."""
    origin = "audit.example.com/heads"
    extend(log.store, "run-a", 5)
    note = tmp_path / "tree-head.note"
    code, summary = log.cli("tree-head", "--no-publish", "--origin", origin, "-o", str(note))
    assert code == 0, summary
    assert summary["origin"] == origin
    got_origin, size, root = AUDITOR.open_checkpoint(
        note.read_text("utf-8"), summary["verifierKey"]
    )
    assert (got_origin, size, base64.b64encode(root).decode()) == (
        origin,
        1,
        summary["rootHash"],
    )
    assert origin != DEFAULT_ORIGIN
    # the CLI's own trusted-tree-head check takes it, with its proof from the store
    public = log.state / "audit" / "checkpoint.key.pub"
    code, verdict = log.cli(
        "verify", "--run", "run-a", "--tree-head", str(note), "--public-key", str(public)
    )
    assert code == 0 and verdict["valid"], verdict
    code, proof = log.cli("prove", "--run", "run-a")
    assert code == 0 and proof["checkpoint"].startswith(origin + "\n"), proof


def test_keygen_format_raw_writes_raw_keys_that_sign_and_verify(log: Log, tmp_path: Path) -> None:
    """``keygen --format raw`` writes the raw 32-byte Ed25519 seed (0600) and public key, the
    form KMS exports and Kubernetes Secrets hold. Ignored, the files are PEM: a tool that
    expects raw bytes cannot read them. The raw key must still be one the commands that read
    keys take: ``tree-head --key`` signs with it, ``verify --public-key`` checks with the raw
    public key, and the standalone verifier agrees."""
    key = tmp_path / "keys" / "signing.key"
    code, made = log.cli(
        "keygen", "--format", "raw", "--key", str(key), "--key-name", "ops.example"
    )
    assert code == 0, made
    public = Path(made["publicKey"])
    seed, raw_public = key.read_bytes(), public.read_bytes()
    assert (len(seed), len(raw_public)) == (32, 32)
    assert key.stat().st_mode & 0o777 == 0o600
    assert Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw() == raw_public
    assert made["verifierKey"].startswith("ops.example+")

    extend(log.store, "run-a", 4)
    note = tmp_path / "tree-head.note"
    keyed = ("--key", str(key), "--key-name", "ops.example")
    code, signed = log.cli("tree-head", "--no-publish", *keyed, "-o", str(note))
    assert code == 0 and signed["verifierKey"] == made["verifierKey"], signed
    assert AUDITOR.open_checkpoint(note.read_text("utf-8"), made["verifierKey"])[1] == 1
    trusted = ("--tree-head", str(note), "--public-key", str(public), "--key-name", "ops.example")
    code, verdict = log.cli("verify", "--run", "run-a", *trusted)
    assert code == 0 and verdict["valid"], verdict
    # the log is signed with it too, and Go's sumdb/note takes the key
    code, checkpoint = log.cli("log-checkpoint", *keyed)
    assert code == 0 and checkpoint["verifierKey"] == made["verifierKey"]
    code, _, err = tlogverify("-log", str(log.tiles), "-vkey", made["verifierKey"])
    assert code == 0, err
    # the default stays PEM
    pem = tmp_path / "keys" / "pem.key"
    assert log.cli("keygen", "--key", str(pem))[0] == 0
    assert pem.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
