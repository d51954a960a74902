"""Issue 12.2 and 12.3: verification reports *positions*, and verifying nothing is not "valid".

``firstBrokenIndex`` must be the 0-based position of the first failing link, never the link's
``index`` label (which the hash does not cover, so a tamperer could pick what is reported).
Every tampered chain here is checked three ways that must agree: ``audit verify --run`` on the
store (SQLite and a real PostgreSQL), ``audit verify --file`` on an export, and the standalone
``tools/verify_audit_export.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtrail_tools.cli.main import main
from tests.test_audit_cli import Cli, backend, cli, fill, script, verdict  # noqa: F401
from tests.test_audit_store_contract import Backend

N = 12


# --- tampering in the store: the store path, its export and the script agree ----------------
def _delete_7(b: Backend) -> None:
    b.sql("DELETE FROM audit_links WHERE idx = 7")


def _swap_4_and_9(b: Backend) -> None:
    b.sql("UPDATE audit_links SET idx = 1000 WHERE idx = 4")
    b.sql("UPDATE audit_links SET idx = 4 WHERE idx = 9")
    b.sql("UPDATE audit_links SET idx = 9 WHERE idx = 1000")


def _delete_7_and_relabel(b: Backend) -> None:
    """The gap is hidden behind labels far away: the old verifier reported 108."""
    _delete_7(b)
    b.sql("UPDATE audit_links SET idx = idx + 100 WHERE idx > 7")


STORE_TAMPERING: dict[str, tuple[Callable[[Backend], None], dict[str, Any]]] = {
    "link 7 deleted": (_delete_7, verdict(False, N - 1, 7, "prevHash mismatch")),
    "links 4 and 9 swapped": (_swap_4_and_9, verdict(False, N, 4, "prevHash mismatch")),
    "link 7 deleted, labels forged": (
        _delete_7_and_relabel,
        verdict(False, N - 1, 7, "prevHash mismatch"),
    ),
}


@pytest.mark.parametrize("case", list(STORE_TAMPERING))
def test_store_file_and_script_report_the_position(
    backend: Backend,  # noqa: F811
    cli: Cli,  # noqa: F811
    tmp_path: Path,
    case: str,
) -> None:
    fill(backend, N)
    tamper, expected = STORE_TAMPERING[case]
    backend.drop_guards()
    tamper(backend)
    assert cli("verify", "--run", "run-1") == (1, expected)
    export = tmp_path / "tampered.jsonl"
    assert cli("export", "--run", "run-1", "-o", str(export))[0] == 0
    assert cli("verify", "--file", str(export)) == (1, expected)
    assert script(export) == (1, expected)


def test_an_unreadable_row_after_a_gap_is_reported_at_its_position(
    backend: Backend,  # noqa: F811
    cli: Cli,  # noqa: F811
) -> None:
    fill(backend, N)
    backend.drop_guards()
    backend.sql("DELETE FROM audit_links WHERE idx = 2")
    backend.sql("UPDATE audit_links SET event = %s WHERE idx = 5", '{"broken')
    code, result = cli("verify", "--run", "run-1")
    assert (code, result["firstBrokenIndex"], result["reason"]) == (1, 4, "malformed link")


# --- tampering in an export file: the CLI and the script agree -------------------------------
Lines = list[dict[str, Any]]


def _drop_line_8(lines: Lines) -> Lines:
    return lines[:7] + lines[8:]  # line 8 (1-based) holds link 7


def _swap_lines(lines: Lines) -> Lines:
    out = list(lines)
    out[4], out[9] = out[9], out[4]  # labels travel with their lines: position 4 says 9
    return out


def _drop_and_forge(lines: Lines) -> Lines:
    """Line 8 gone, and the survivor after the gap labelled 0 (the label is not hashed)."""
    out = _drop_line_8(lines)
    out[7] = {**out[7], "index": 0}
    return out


def _renumber_after_gap(lines: Lines) -> Lines:
    """Line 8 gone and the labels renumbered: the break is still at position 7."""
    out = _drop_line_8(lines)
    return [{**line, "index": i} for i, line in enumerate(out)]


def _forge_one_label(lines: Lines) -> Lines:
    """Nothing else touched: a label that disagrees with its position is a break there."""
    out = list(lines)
    out[5] = {**out[5], "index": 9}
    return out


FILE_TAMPERING: dict[str, tuple[Callable[[Lines], Lines], dict[str, Any]]] = {
    "line 8 deleted": (_drop_line_8, verdict(False, N - 1, 7, "prevHash mismatch")),
    "lines of links 4 and 9 swapped": (_swap_lines, verdict(False, N, 4, "prevHash mismatch")),
    "line 8 deleted, next label forged": (
        _drop_and_forge,
        verdict(False, N - 1, 7, "prevHash mismatch"),
    ),
    "line 8 deleted, labels renumbered": (
        _renumber_after_gap,
        verdict(False, N - 1, 7, "prevHash mismatch"),
    ),
    "one label forged": (_forge_one_label, verdict(False, N, 5, "index mismatch")),
}


@pytest.mark.parametrize("case", list(FILE_TAMPERING))
def test_an_edited_export_is_reported_at_the_position(
    backend: Backend,  # noqa: F811
    cli: Cli,  # noqa: F811
    tmp_path: Path,
    case: str,
) -> None:
    fill(backend, N)
    export = tmp_path / "links.jsonl"
    assert cli("export", "--run", "run-1", "-o", str(export))[0] == 0
    lines = [json.loads(raw) for raw in export.read_text("utf-8").splitlines()]
    edit, expected = FILE_TAMPERING[case]
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(line) + "\n" for line in edit(lines)), "utf-8")
    assert cli("verify", "--file", str(tampered)) == (1, expected)
    assert script(tampered) == (1, expected)


# --- 12.3: a run with no chain is an error, never "valid" ------------------------------------
def test_verifying_or_exporting_a_run_with_no_chain_fails_naming_it(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fill(backend, 3, tenant="acme")
    store = ("--store", backend.url, "--state-dir", str(tmp_path / "state"))
    for tenant, run in (("globex", "run-1"), ("acme", "run-l")):  # wrong tenant; a typo
        capsys.readouterr()
        assert main(["audit", "verify", "--run", run, "--tenant", tenant, *store]) == 1
        out, err = capsys.readouterr()
        assert json.loads(out) == verdict(False, 0, None, "no links")
        assert f"tenant {tenant!r}, run {run!r}" in err
        target = tmp_path / f"{tenant}-{run}.jsonl"
        argv = ["audit", "export", "--run", run, "--tenant", tenant, "-o", str(target), *store]
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert f"tenant {tenant!r}, run {run!r}" in json.loads(err)["error"]
        assert not target.exists()
        assert main(["audit", "export", "--run", run, "--tenant", tenant, *store]) == 1
        assert capsys.readouterr().out == ""
    assert list(tmp_path.glob("*.jsonl")) == []  # no temp file left either
    assert main(["audit", "verify", "--run", "run-1", "--tenant", "acme", *store]) == 0


def test_an_empty_export_file_is_not_valid(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", "utf-8")
    expected = verdict(False, 0, None, "no links")
    assert cli("verify", "--file", str(empty)) == (1, expected)
    assert script(empty) == (1, expected)


@pytest.mark.parametrize("command", ["verify", "export", "head", "prove"])
def test_tenant_is_listed_with_the_run_in_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["audit", command, "--help"])
    text = capsys.readouterr().out
    chain = text.index("\nchain:")
    connection = text.index("\nconnection:")
    section = text[chain : connection if connection > chain else len(text)]
    assert "--tenant" in section and "--run" in section
    assert "--tenant" not in text[connection : chain if chain > connection else len(text)]
