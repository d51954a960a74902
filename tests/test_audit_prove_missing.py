"""``audit prove`` of a run that has no chain names the tenant and run looked up (issue 12.3).

Found while checking 12.3 as a new user: ``verify`` and ``export`` of nothing failed naming
the chain, but ``prove --run R --tenant T`` answered "not in tree head N (sign a newer one)",
sending the user to sign tree heads that could never contain a run that does not exist.
SQLite and a real PostgreSQL (the backend fixture of the audit CLI tests).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtrail_tools.cli.main import main
from tests.test_audit_cli import backend, fill  # noqa: F401
from tests.test_audit_store_contract import Backend


def test_prove_of_a_run_with_no_chain_fails_naming_it(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fill(backend, 3, tenant="acme")
    store = ("--store", backend.url, "--state-dir", str(tmp_path / "state"))
    key = ("--key", str(tmp_path / "keys" / "checkpoint.key"))
    assert main(["audit", "tree-head", "--no-publish", *key, *store]) == 0
    capsys.readouterr()
    for tenant, run in (("globex", "run-1"), ("acme", "run-l")):  # wrong tenant; a typo
        assert main(["audit", "prove", "--run", run, "--tenant", tenant, *store]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        error = json.loads(err)["error"]
        assert f"no audit chain for tenant {tenant!r}, run {run!r}" in error
        assert "newer" not in error
    assert main(["audit", "prove", "--run", "run-1", "--tenant", "acme", *store]) == 0
    assert json.loads(capsys.readouterr().out)["proof"]["head"]["length"] == 3
