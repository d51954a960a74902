"""Tampering with the transparency log or a run's bundle, each caught by runtrail's standalone
verifier (tools/verify_audit_log.py, run with runtrail made unimportable) and, for the log,
by Go's sumdb (tools/tlogverify): a fork, a rollback, an edited tile or entry, a run's links
edited after sealing (with and without re-sealing), a run cut short, too few witnesses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtrail.audit import seal
from runtrail.audit.export import export_lines
from runtrail.audit.link import Link, link_from_json
from runtrail.audit.note import NoteSigner, sign_note
from runtrail.audit.tree_head import TreeHead
from runtrail.audit.verify import verify_links
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail_tools.cli.main import main
from tests.go_tools import go_tool
from tests.test_audit_tlog_go import Log, extend

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "verify_audit_log.py"
#: the verifier, run where ``import runtrail`` fails: it must need none of it
NO_RUNTRAIL = "import runpy, sys; sys.modules['runtrail'] = None; sys.argv = sys.argv[1:]; "
NO_RUNTRAIL += "runpy.run_path(sys.argv[0], run_name='__main__')"


def verifier(*args: str) -> tuple[int, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", NO_RUNTRAIL, str(TOOL), *args],
        capture_output=True, text=True, timeout=120, cwd="/",
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def tlogverify(*args: str) -> tuple[int, str]:
    proc = subprocess.run(
        [str(go_tool("tlogverify")), *args], capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stderr


@pytest.fixture
def log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    opened = Log(tmp_path, capsys)
    yield opened
    opened.store.close()


@pytest.fixture
def signed(log: Log, tmp_path: Path) -> dict[str, Any]:
    """A log of 600 leaves over three runs, signed twice (the first kept as old.note)."""
    for run, count in (("run-a", 250), ("run-b", 20)):
        extend(log.store, run, count)
    code, first = log.cli("log-checkpoint")
    assert code == 0
    (tmp_path / "old.note").write_text(first["note"])
    extend(log.store, "run-c", 300)
    extend(log.store, "run-b", 30)
    code, second = log.cli("log-checkpoint")
    assert code == 0 and second["size"] == 600
    return {"first": first, "second": second, "vkey": second["verifierKey"]}


def log_verdicts(log: Log, vkey: str, *old: Path) -> tuple[tuple[int, Any], tuple[int, str]]:
    olds = [arg for path in old for arg in ("--old", str(path))]
    ours = verifier("log", "--log", str(log.tiles), "--vkey", vkey, *olds)
    go_old = ["-old", str(old[0])] if old else []
    return ours, tlogverify("-log", str(log.tiles), "-vkey", vkey, *go_old)


def test_the_untouched_log_verifies(log: Log, signed: dict[str, Any], tmp_path: Path) -> None:
    (code, verdict), (go_code, err) = log_verdicts(log, signed["vkey"], tmp_path / "old.note")
    assert (code, verdict["valid"], verdict["size"], go_code) == (0, True, 600, 0), err
    # the tiles as log-checkpoint names them (a file:// URL) verify the same
    assert signed["second"]["tiles"].startswith("file://")
    code, verdict = verifier("log", "--log", signed["second"]["tiles"], "--vkey", signed["vkey"])
    assert (code, verdict["valid"], verdict["size"]) == (0, True, 600), verdict


def test_a_fork_is_detected(log: Log, signed: dict[str, Any], tmp_path: Path) -> None:
    """The operator signs another tree of the size an auditor already holds."""
    signer = NoteSigner.from_skey(_skey(log))
    forged = TreeHead(signed["first"]["origin"], signed["first"]["size"], b"\x05" * 32)
    (tmp_path / "forged.note").write_text(sign_note(forged.body(), signer))
    (code, verdict), (go_code, err) = log_verdicts(log, signed["vkey"], tmp_path / "forged.note")
    assert (code, verdict["reason"]) == (1, "fork")
    assert go_code == 1 and "fork" in err


def test_a_rollback_is_detected(log: Log, signed: dict[str, Any], tmp_path: Path) -> None:
    """A smaller (older) checkpoint served after the reader saw the larger one."""
    (tmp_path / "new.note").write_text(signed["second"]["note"])
    (log.tiles / "checkpoint").write_text(signed["first"]["note"])
    (code, verdict), (go_code, err) = log_verdicts(log, signed["vkey"], tmp_path / "new.note")
    assert (code, verdict["reason"]) == (1, "rollback")
    assert go_code == 1 and "rollback" in err


@pytest.mark.parametrize(
    ("path", "reason"),
    [("tile/0/001", "edited tile"), ("tile/1/000.p/2", "edited tile"),
     ("tile/entries/002.p/88", "edited entries")],
)  # fmt: skip
def test_an_edited_tile_or_entry_is_detected(
    log: Log, signed: dict[str, Any], path: str, reason: str
) -> None:
    target = log.tiles / path
    data = bytearray(target.read_bytes())
    data[40] ^= 0x01
    target.write_bytes(bytes(data))
    (code, verdict), (go_code, _) = log_verdicts(log, signed["vkey"])
    assert (code, verdict["reason"]) == (1, reason)
    assert go_code == 1


def _skey(log: Log) -> str:
    from runtrail.audit.keys import load_signer

    return load_signer(log.state / "audit" / "checkpoint.key", "runtrail.local/audit").skey()


def _bundle(log: Log, tmp_path: Path, run: str = "run-b") -> tuple[Path, dict[str, Any]]:
    path = tmp_path / f"{run}.bundle.json"
    code, summary = log.cli("bundle", "--run", run, "-o", str(path))
    assert code == 0
    return path, summary


def _links(bundle: dict[str, Any]) -> list[Link]:
    return [link_from_json(json.loads(line))[0] for line in bundle["links"].splitlines()]


def test_a_bundle_verifies_offline_and_pins_an_edit_to_its_first_link(
    log: Log, signed: dict[str, Any], tmp_path: Path
) -> None:
    path, summary = _bundle(log, tmp_path)
    assert summary["proven"] == 50 and summary["keys"]["log"] == signed["vkey"]
    code, verdict = verifier("bundle", str(path))
    assert (code, verdict["valid"], verdict["length"]) == (0, True, 50)
    original = json.loads(path.read_text())

    # an event edited, not re-sealed: the chain itself breaks there
    links = _links(original)
    edited = [*links[:7], Link(7, {**links[7].event, "data": {"i": -1}}, links[7].prev_hash,
                               links[7].hash), *links[8:]]  # fmt: skip
    verdict = _verify_with_links(path, original, edited)
    assert (verdict["reason"], verdict["firstBrokenIndex"]) == ("hash mismatch", 7)

    # edited and every link after it re-sealed: the chain is whole, the log is not fooled
    resealed = links[:12]
    prev = links[11].hash
    for link in links[12:]:
        event = {**link.event, "data": {"i": "rewritten"}} if link.index == 12 else link.event
        resealed.append(seal(link.index, prev, event))
        prev = resealed[-1].hash
    assert verify_links(resealed).valid
    verdict = _verify_with_links(path, original, resealed)
    assert (verdict["reason"], verdict["firstBrokenIndex"]) == ("rewritten", 12)

    # the tail cut off: fewer links than the log holds
    verdict = _verify_with_links(path, original, links[:45])
    assert (verdict["reason"], verdict["firstBrokenIndex"]) == ("truncated", 45)


def _verify_with_links(path: Path, bundle: dict[str, Any], links: list[Link]) -> Any:
    tampered = path.with_suffix(".tampered.json")
    text = b"".join(export_lines(links)).decode()
    tampered.write_text(json.dumps({**bundle, "links": text}))
    code, verdict = verifier("bundle", str(tampered))
    assert code == 1
    return verdict


def test_a_bundle_needs_its_quorum_of_witnesses(
    log: Log, signed: dict[str, Any], tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from runtrail.audit.cosignature import WitnessVerifier

    path, _ = _bundle(log, tmp_path)
    witness = WitnessVerifier.of_signer(NoteSigner("w.example", Ed25519PrivateKey.generate()))
    code, verdict = verifier("bundle", str(path), "--witness", witness.vkey(), "--quorum", "1")
    assert (code, verdict["reason"], verdict["witnessedBy"]) == (1, "not witnessed", [])
    other = NoteSigner("impostor", Ed25519PrivateKey.generate()).verifier.vkey()
    code, verdict = verifier("bundle", str(path), "--vkey", other)
    assert (code, verdict["reason"]) == (1, "bad signature")


def test_the_store_and_the_folder_can_be_copied_and_still_verify(
    log: Log, signed: dict[str, Any], tmp_path: Path
) -> None:
    """A mirror: the tiles copied elsewhere verify the same; the store reopened agrees."""
    mirror = tmp_path / "mirror"
    shutil.copytree(log.tiles, mirror)
    code, verdict = verifier("log", "--log", str(mirror), "--vkey", signed["vkey"])
    assert (code, verdict["size"]) == (0, 600)
    reopened = open_store(AUDIT_LINKS, log.url)
    try:
        assert reopened.log_size() == 600
    finally:
        reopened.close()
    assert main(["audit", "log-prove", "--run", "run-c", "--store", log.url,
                 "--state-dir", str(log.state), "--tenant", "acme"]) == 0  # fmt: skip
