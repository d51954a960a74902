"""The audit log API's query parameters over real HTTP: ``index`` and ``size`` of
``/v1/log/inclusion``, ``old`` and ``new`` of ``/v1/log/consistency``, out of range or not
numbers. Each must answer a 400 naming the parameter: a number past the store's 64-bit
columns used to crash the handler, so the client got no HTTP answer at all (the connection
closed, a traceback in the service's log), and a negative one a misleading "not in the log".
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from runtrail.audit.tile_store import FileTileStore
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.log_api import LogApi
from runtrail_tools.cli.main import main
from tests.test_audit_tlog_go import extend

HUGE = str(2**63)


@pytest.fixture
def base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[str]:
    url = sqlite_url(tmp_path / "audit.db")
    store = open_store(AUDIT_LINKS, url)
    extend(store, "run-a", 5)
    tiles = tmp_path / "tlog"
    argv = ["audit", "log-checkpoint", "--store", url, "--state-dir", str(tmp_path / "state")]
    assert main([*argv, "--tiles", tiles.as_uri(), "--tenant", "acme"]) == 0
    capsys.readouterr()
    api = LogApi(store, FileTileStore(tiles), "127.0.0.1", 0)
    api.start()
    try:
        yield f"http://127.0.0.1:{api.port}"
    finally:
        api.stop()
        store.close()


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


INCLUSION = "/v1/log/inclusion?tenant=acme&run=run-a"


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("&index=-1", "index"),
        ("&index=abc", "index"),
        ("&index=" + quote("²"), "index"),
        ("&index=" + HUGE, "index"),
        ("&index=0&size=-1", "size"),
        ("&index=0&size=x", "size"),
        ("&index=0&size=" + HUGE, "size"),
        ("", "index"),
    ],
)
def test_inclusion_index_and_size_out_of_range_are_a_400_naming_them(
    base: str, query: str, name: str
) -> None:
    """A bad ``index``/``size`` must be refused naming it; a huge one dropped the connection
    (an uncaught OverflowError), a negative one claimed the link "is not in the log"."""
    status, body = get(base + INCLUSION + query)
    assert status == 400, (query, status, body)
    assert name in body["error"]


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("old=-1", "old"),
        ("old=" + HUGE, "old"),
        ("old=five", "old"),
        ("old=5&new=-1", "new"),
        ("old=5&new=" + HUGE, "new"),
        ("new=5", "old"),
    ],
)
def test_consistency_old_and_new_out_of_range_are_a_400_naming_them(
    base: str, query: str, name: str
) -> None:
    """A bad ``old``/``new`` must be refused naming it, not crash the handler (no answer)."""
    status, body = get(f"{base}/v1/log/consistency?{query}")
    assert status == 400, (query, status, body)
    assert name in body["error"]


def test_valid_numbers_still_prove_and_unknown_sizes_are_a_404(base: str) -> None:
    """The checks must not refuse what the log can prove, nor hide a genuine miss."""
    status, body = get(base + INCLUSION + "&index=4&size=5")
    assert status == 200 and body["link"]["index"] == 4 and body["treeSize"] == 5
    status, body = get(f"{base}/v1/log/consistency?old=5&new=5")
    assert status == 200 and (body["oldSize"], body["newSize"]) == (5, 5)
    status, body = get(base + INCLUSION + "&index=5")
    assert status == 404 and "not in the log" in body["error"]
    status, body = get(base + INCLUSION + "&index=0&size=3")
    assert status == 404 and "size 3" in body["error"]
