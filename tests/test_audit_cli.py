"""``runtrail audit …`` against SQLite and a real PostgreSQL: the tamper table, trusted
tree heads (truncation, re-sealed rewrite, fork), tenants, and the exit codes.

The commands run in-process through the console script's ``main`` (exit code + the JSON it
prints); rows are tampered with through a raw connection that goes around the store. The same
commands as child processes, against a live service, are in tests/test_audit_service_e2e.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtrail.audit import TopicPartition, read_export
from runtrail_tools.cli.main import main
from tests.test_audit_store_contract import BACKENDS, Backend, event, links_for, open_backend

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "verify_audit_export.py"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return open_backend(str(request.param), tmp_path, request)


class Cli:
    """Runs ``runtrail audit …`` in-process with this test's store and state folder."""

    def __init__(self, capsys: pytest.CaptureFixture[str], url: str, state: Path) -> None:
        self.capsys = capsys
        self.url = url
        self.state = state

    def __call__(self, *args: str, tenant: str = "acme") -> tuple[int, Any]:
        self.capsys.readouterr()
        argv = ["audit", *args, "--store", self.url, "--state-dir", str(self.state)]
        code = main([*argv, "--tenant", tenant])
        lines = self.capsys.readouterr().out.strip().splitlines()
        return code, json.loads(lines[-1]) if lines else None


@pytest.fixture
def cli(backend: Backend, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Cli:
    return Cli(capsys, backend.url, tmp_path / "state")


def fill(backend: Backend, n: int = 6, tenant: str = "acme", run: str = "run-1") -> None:
    """Seal a run's first ``n`` events as the service would: the partition's offset moves on
    by ``n`` (offsets never move back)."""
    links = links_for([event(seq, tenant, run) for seq in range(1, n + 1)])
    at = backend.store.stored_offsets("runtrail.events", [0]).get(0, 0)
    backend.store.append_batch(links, {TopicPartition("runtrail.events", 0): at + n})


def verdict(valid: bool, length: int, index: int | None, reason: str | None) -> dict[str, Any]:
    return {"valid": valid, "length": length, "firstBrokenIndex": index, "reason": reason}


def script(path: Path) -> tuple[int, Any]:
    proc = subprocess.run(
        [sys.executable, "-I", str(TOOL), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


# --- the seed's tamper table, in the store and in an export ----------------------------------
def _payload(b: Backend) -> None:
    text = b.sql("SELECT event FROM audit_links WHERE idx = 3")[0][0]
    b.sql("UPDATE audit_links SET event = %s WHERE idx = 3", text.replace('"rows":4', '"rows":5'))


def _hash(b: Backend) -> None:
    b.sql("UPDATE audit_links SET hash = %s WHERE idx = 4", "f" * 64)


def _delete(b: Backend) -> None:
    b.sql("DELETE FROM audit_links WHERE idx = 2")


def _swap(b: Backend) -> None:
    b.sql("UPDATE audit_links SET idx = 1000 WHERE idx = 1")
    b.sql("UPDATE audit_links SET idx = 1 WHERE idx = 2")
    b.sql("UPDATE audit_links SET idx = 2 WHERE idx = 1000")


TAMPERING = {
    "modified payload": (_payload, verdict(False, 6, 3, "hash mismatch")),
    "modified stored hash": (_hash, verdict(False, 6, 4, "hash mismatch")),
    "deleted middle link": (_delete, verdict(False, 5, 2, "prevHash mismatch")),
    "swapped pair": (_swap, verdict(False, 6, 1, "prevHash mismatch")),
}


def test_an_untouched_chain_verifies(backend: Backend, cli: Cli, tmp_path: Path) -> None:
    fill(backend)
    assert cli("verify", "--run", "run-1") == (0, verdict(True, 6, None, None))
    export = tmp_path / "links.jsonl"
    assert cli("export", "--run", "run-1", "-o", str(export)) == (
        0,
        {"file": str(export), "links": 6},
    )
    assert cli("verify", "--file", str(export)) == (0, verdict(True, 6, None, None))
    assert script(export) == (0, verdict(True, 6, None, None))


@pytest.mark.parametrize("case", list(TAMPERING))
def test_tampering_in_the_store_is_reported_with_its_index(
    backend: Backend, cli: Cli, tmp_path: Path, case: str
) -> None:
    fill(backend)
    export = tmp_path / "before.jsonl"
    assert cli("export", "--run", "run-1", "-o", str(export))[0] == 0
    tamper, expected = TAMPERING[case]
    backend.drop_guards()
    tamper(backend)
    assert cli("verify", "--run", "run-1") == (1, expected)
    # the tampered store exported, then checked with no database, by us and by the script
    after = tmp_path / "after.jsonl"
    assert cli("export", "--run", "run-1", "-o", str(after))[0] == 0
    assert cli("verify", "--file", str(after)) == (1, expected)
    assert script(after) == (1, expected)
    assert cli("verify", "--file", str(export))[0] == 0  # the earlier export is still good


def test_an_unreadable_stored_event_is_a_malformed_link(backend: Backend, cli: Cli) -> None:
    fill(backend)
    backend.drop_guards()
    backend.sql("UPDATE audit_links SET event = %s WHERE idx = 1", '{"broken')
    assert cli("verify", "--run", "run-1") == (1, verdict(False, 6, 1, "malformed link"))
    assert cli("export", "--run", "run-1")[0] == 2  # cannot write what cannot be read


# --- against a trusted tree head ------------------------------------------------------------
def tree_head_and_proof(cli: Cli, tmp_path: Path, name: str) -> tuple[Path, Path]:
    note, proof = tmp_path / f"{name}.note", tmp_path / f"{name}.proof.json"
    code, summary = cli("tree-head", "--no-publish", "-o", str(note))
    assert code == 0 and summary["published"] is False
    code, bundle = cli("prove", "--run", "run-1", "-o", str(proof))
    assert code == 0 and bundle["checkpoint"] == note.read_text()
    return note, proof


def public_key(cli: Cli) -> Path:
    return cli.state / "audit" / "checkpoint.key.pub"


def test_truncated_tail_is_detected_with_a_trusted_tree_head(
    backend: Backend, cli: Cli, tmp_path: Path
) -> None:
    fill(backend)
    note, proof = tree_head_and_proof(cli, tmp_path, "cp")
    trusted = ("--tree-head", str(note), "--public-key", str(public_key(cli)))
    assert cli("verify", "--run", "run-1", *trusted) == (0, verdict(True, 6, None, None))

    backend.drop_guards()
    backend.sql("DELETE FROM audit_links WHERE idx >= 4")
    assert cli("verify", "--run", "run-1") == (0, verdict(True, 4, None, None))  # fine alone
    assert cli("verify", "--run", "run-1", *trusted) == (1, verdict(False, 4, 4, "truncated"))
    cut = tmp_path / "cut.jsonl"
    cli("export", "--run", "run-1", "-o", str(cut))
    assert cli("verify", "--file", str(cut), *trusted, "--proof", str(proof)) == (
        1,
        verdict(False, 4, 4, "truncated"),
    )


def test_resealed_rewrite_is_detected_with_a_trusted_tree_head(
    backend: Backend, cli: Cli, tmp_path: Path
) -> None:
    fill(backend)
    note, proof = tree_head_and_proof(cli, tmp_path, "cp")
    trusted = ("--tree-head", str(note), "--public-key", str(public_key(cli)))

    backend.drop_guards()
    backend.sql("DELETE FROM audit_links")
    doctored = [event(s, note="doctored") if s == 2 else event(s) for s in range(1, 7)]
    backend.store.append_batch(links_for(doctored), {})
    assert cli("verify", "--run", "run-1") == (0, verdict(True, 6, None, None))  # resealed
    assert cli("verify", "--run", "run-1", *trusted) == (1, verdict(False, 6, 5, "rewritten"))
    resealed = tmp_path / "resealed.jsonl"
    cli("export", "--run", "run-1", "-o", str(resealed))
    assert cli("verify", "--file", str(resealed), *trusted, "--proof", str(proof)) == (
        1,
        verdict(False, 6, 5, "rewritten"),
    )


def test_a_fork_between_two_signed_tree_heads_is_detected(
    backend: Backend, cli: Cli, tmp_path: Path
) -> None:
    """The operator rewrites a run, re-seals it and signs a fresh tree head with the real key:
    each tree head alone looks fine to its own reader, the two together are a fork."""
    fill(backend)
    first, first_proof = tree_head_and_proof(cli, tmp_path, "first")
    backend.drop_guards()
    backend.sql("DELETE FROM audit_links")
    doctored = [event(s, note="doctored") if s == 6 else event(s) for s in range(1, 7)]
    backend.store.append_batch(links_for(doctored), {})
    second, second_proof = tree_head_and_proof(cli, tmp_path, "second")
    key = ("--public-key", str(public_key(cli)))
    assert cli("verify", "--run", "run-1", "--tree-head", str(second), *key)[0] == 0
    both = ("--tree-head", str(first), "--tree-head", str(second), *key)
    assert cli("verify", "--run", "run-1", *both) == (1, verdict(False, 6, None, "fork"))
    current = tmp_path / "current.jsonl"
    cli("export", "--run", "run-1", "-o", str(current))
    proofs = ("--proof", str(first_proof), "--proof", str(second_proof))
    assert cli("verify", "--file", str(current), *both, *proofs) == (
        1,
        verdict(False, 6, None, "fork"),
    )


def test_a_run_absent_from_the_tree_head_or_a_forged_one(
    backend: Backend, cli: Cli, tmp_path: Path
) -> None:
    fill(backend)
    note, _ = tree_head_and_proof(cli, tmp_path, "cp")
    fill(backend, 2, run="run-later")
    trusted = ("--tree-head", str(note), "--public-key", str(public_key(cli)))
    assert cli("verify", "--run", "run-later", *trusted) == (
        1,
        verdict(False, 2, None, "head not in checkpoint"),
    )
    assert cli("prove", "--run", "run-later")[0] == 1
    assert cli("tree-head", "--no-publish")[0] == 0
    assert cli("prove", "--run", "run-later")[0] == 0  # in the newer one
    assert cli("prove", "--run", "run-later", "--tree-head-id", "1")[0] == 1
    forged = tmp_path / "forged.note"
    forged.write_text(note.read_text().replace("\n1\n", "\n2\n", 1))
    forged_args = ("--tree-head", str(forged), "--public-key", str(public_key(cli)))
    assert cli("verify", "--run", "run-1", *forged_args) == (2, None)


def test_a_verifier_key_string_works_as_the_public_key(
    backend: Backend, cli: Cli, tmp_path: Path
) -> None:
    fill(backend)
    code, summary = cli("tree-head", "--no-publish", "-o", str(tmp_path / "cp.note"))
    assert code == 0
    vkey = tmp_path / "verifier.txt"
    vkey.write_text(summary["verifierKey"] + "\n")
    args = ("--tree-head", str(tmp_path / "cp.note"), "--public-key", str(vkey))
    assert cli("verify", "--run", "run-1", *args) == (0, verdict(True, 6, None, None))


def test_the_old_names_still_answer_with_a_deprecation(
    backend: Backend, cli: Cli, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fill(backend)
    note = tmp_path / "old.note"
    where = ["--store", cli.url, "--state-dir", str(cli.state), "--tenant", "acme"]
    capsys.readouterr()
    assert main(["audit", "checkpoint", "--no-publish", "-o", str(note), *where]) == 0
    deprecation = "runtrail audit checkpoint is deprecated: use runtrail audit tree-head"
    assert deprecation in capsys.readouterr().err.splitlines()
    args = ("--checkpoint", str(note), "--public-key", str(public_key(cli)))
    assert cli("verify", "--run", "run-1", *args) == (0, verdict(True, 6, None, None))
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    listed = capsys.readouterr().out
    assert "tree-head" in listed and "    checkpoint " not in listed


# --- tenants, heads, keys, errors ------------------------------------------------------------
def test_tenants_never_mix(backend: Backend, cli: Cli, tmp_path: Path) -> None:
    fill(backend, 3, tenant="acme")
    fill(backend, 5, tenant="globex")
    acme = cli("head", "--run", "run-1", tenant="acme")[1]
    globex = cli("head", "--run", "run-1", tenant="globex")[1]
    assert (acme["length"], globex["length"]) == (3, 5) and acme["hash"] != globex["hash"]
    assert cli("verify", "--run", "run-1", tenant="globex") == (0, verdict(True, 5, None, None))
    out = tmp_path / "globex.jsonl"
    cli("export", "--run", "run-1", "-o", str(out), tenant="globex")
    assert {link.tenant_id for link in read_export(out)} == {"globex"}
    # a run with no links in this tenant: the genesis head, and exit 1 (nothing to trust)
    assert cli("head", "--run", "run-1", tenant="initech") == (
        1,
        {"tenantId": "initech", "runId": "run-1", "length": 0, "hash": "0" * 64},
    )


def test_export_to_stdout_is_the_same_jsonl(
    backend: Backend, cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(backend, 3)
    out = tmp_path / "links.jsonl"
    cli("export", "--run", "run-1", "-o", str(out))
    capsys.readouterr()
    assert main(["audit", "export", "--run", "run-1", "--store", cli.url, "--tenant", "acme"]) == 0
    assert capsys.readouterr().out == out.read_text("utf-8")


def test_keygen_never_overwrites(cli: Cli, tmp_path: Path) -> None:
    key = tmp_path / "keys" / "signing.key"
    code, made = cli("keygen", "--key", str(key), "--key-name", "audit.example")
    assert code == 0 and made["verifierKey"].startswith("audit.example+")
    assert Path(made["publicKey"]).exists() and key.stat().st_mode & 0o777 == 0o600
    before = key.read_bytes()
    assert cli("keygen", "--key", str(key))[0] == 2
    assert key.read_bytes() == before
    code, signed = cli(
        "tree-head", "--no-publish", "--key", str(key), "--key-name", "audit.example"
    )
    assert code == 0 and signed["verifierKey"] == made["verifierKey"]


def test_unusable_input_exits_two(cli: Cli, tmp_path: Path) -> None:
    assert cli("verify", "--file", str(tmp_path / "absent.jsonl"))[0] == 2
    note = tmp_path / "cp.note"
    assert cli("tree-head", "--no-publish", "-o", str(note))[0] == 0
    assert cli("verify", "--run", "r", "--tree-head", str(note))[0] == 2  # no key given
    with pytest.raises(SystemExit):
        main(["audit", "verify", "--run", "r", "--file", "x"])  # one source only
    assert main(["audit", "head", "--run", "r", "--store", "postgresql://127.0.0.1:1/none"]) == 2
    assert main(["audit", "head", "--run", "r", "--store", "mysql://h/db"]) == 2
