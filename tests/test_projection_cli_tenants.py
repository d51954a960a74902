"""``projection show`` and ``projection list`` scope tenants alike (issue 12, "what a new user
tripped over"): ``--tenant``, else ``RUNTRAIL_TENANT`` if set, else every tenant. Without one,
``show`` finds the run in whichever tenant holds it and names the tenants when several do.
On SQLite and a real PostgreSQL."""

from __future__ import annotations

import json

import pytest

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import ProjectionBatch
from tests.projector_support import cli
from tests.test_projection_store import UrlFactory, new_url, state_of  # noqa: F401


@pytest.fixture
def url(new_url: UrlFactory, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    monkeypatch.delenv("RUNTRAIL_TENANT", raising=False)
    made = new_url("projection")
    store = open_store(PROJECTIONS, made)
    store.apply_batch(
        ProjectionBatch(
            projections=[
                state_of("only-acme", tenant="acme"),
                state_of("shared", tenant="acme"),
                state_of("shared", 5, tenant="globex"),
            ]
        )
    )
    store.close()
    return made


def show(url: str, *args: str) -> tuple[int, dict[str, object] | None, str]:
    status, out, err = cli("projection", "show", "--store", url, *args)
    return status, json.loads(out) if out else None, err


def test_show_without_tenant_finds_the_run_in_any_tenant(url: str) -> None:
    status, row, _ = show(url, "--run", "only-acme")
    assert status == 0 and row is not None and row["tenantId"] == "acme"
    status, row, err = show(url, "--run", "shared")
    assert (status, row) == (2, None)
    assert "several tenants ('acme', 'globex')" in err and "--tenant" in err
    status, row, _ = show(url, "--run", "shared", "--tenant", "globex")
    assert status == 0 and row is not None and (row["tenantId"], row["version"]) == ("globex", "5")
    status, _, err = show(url, "--run", "nope")
    assert status == 1 and "run 'nope' in any tenant" in err


def test_a_wrong_tenant_names_the_one_that_holds_the_run(url: str) -> None:
    status, row, err = show(url, "--run", "only-acme", "--tenant", "globex")
    assert (status, row) == (1, None)
    assert "in tenant 'globex' (it is in tenant 'acme')" in err


def test_show_and_list_share_one_tenant_scope(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def listed(*args: str) -> list[tuple[str, str]]:
        out = cli("projection", "list", "--store", url, "--json", *args)[1]
        return [(r["tenantId"], r["runId"]) for r in map(json.loads, out.splitlines())]

    everything = [("acme", "only-acme"), ("acme", "shared"), ("globex", "shared")]
    assert listed() == everything
    assert listed("--tenant", "globex") == [("globex", "shared")]
    monkeypatch.setenv("RUNTRAIL_TENANT", "acme")  # now both read acme only
    assert listed() == [("acme", "only-acme"), ("acme", "shared")]
    status, row, _ = show(url, "--run", "shared")
    assert status == 0 and row is not None and row["tenantId"] == "acme"
    assert show(url, "--run", "shared", "--tenant", "globex")[0] == 0  # the flag wins


def test_help_lists_tenant_with_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    from runtrail_tools.cli.main import main

    with pytest.raises(SystemExit):
        main(["projection", "show", "--help"])
    text = capsys.readouterr().out
    section = text[text.index("\nrun:") : text.index("\nconnection:")]
    assert "--run" in section and "--tenant" in section
