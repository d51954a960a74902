"""runtrail's transparency log read by Go's own ``golang.org/x/mod/sumdb`` (tools/tlogverify).

The Go program shares no code with runtrail: it verifies the signed checkpoint with
``sumdb/note``, reads the C2SP tiles over the audit API's HTTP (and from the folder), checks
them and every entry against the root with ``sumdb/tlog``, and makes its own inclusion and
consistency proofs; these must be exactly the ones ``runtrail audit log-prove`` /
``log-consistency`` and the audit API hand out.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from runtrail.audit import GENESIS_HASH, seal
from runtrail.audit.store import LinkStore
from runtrail.audit.tile_store import FileTileStore
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.log_api import LogApi
from runtrail_tools.cli.main import main
from tests.go_tools import go_tool


def event(run: str, i: int) -> dict[str, Any]:
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


def extend(store: LinkStore, run: str, count: int) -> None:
    head = store.head("acme", run)
    index, prev = (0, GENESIS_HASH) if head is None else (head.length, head.hash)
    batch = []
    for i in range(index, index + count):
        link = seal(i, prev, event(run, i))
        batch.append(link)
        prev = link.hash
    store.append_batch(batch, {})


class Log:
    """A store, its tile folder and ``runtrail audit …`` run in-process on them."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = sqlite_url(tmp_path / "audit.db")
        self.state = tmp_path / "state"
        self.tiles = tmp_path / "tlog"
        self.capsys = capsys
        self.store = open_store(AUDIT_LINKS, self.url)

    def cli(self, *args: str) -> tuple[int, Any]:
        self.capsys.readouterr()
        argv = ["audit", *args, "--store", self.url, "--state-dir", str(self.state)]
        code = main([*argv, "--tiles", self.tiles.as_uri(), "--tenant", "acme"])
        lines = self.capsys.readouterr().out.strip().splitlines()
        return code, json.loads(lines[-1]) if lines else None


@pytest.fixture
def log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    opened = Log(tmp_path, capsys)
    yield opened
    opened.store.close()


def tlogverify(*args: str) -> tuple[int, Any, str]:
    proc = subprocess.run(
        [str(go_tool("tlogverify")), *args], capture_output=True, text=True, timeout=120
    )
    out = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, out, proc.stderr


def test_go_reads_the_tiles_and_agrees_on_every_root_and_proof(log: Log, tmp_path: Path) -> None:
    for run, count in (("run-a", 200), ("run-b", 90), ("run-c", 10)):
        extend(log.store, run, count)
    code, first = log.cli("log-checkpoint")
    assert code == 0 and first["size"] == 300 and first["signed"]
    old = tmp_path / "old.note"
    old.write_text(first["note"])
    extend(log.store, "run-b", 400)
    extend(log.store, "run-d", 3)
    code, second = log.cli("log-checkpoint")
    assert code == 0 and second["size"] == 703
    code, again = log.cli("log-checkpoint")
    assert code == 0 and not again["signed"]  # nothing new: nothing signed

    code, inclusion = log.cli("log-prove", "--run", "run-b")  # its last link, index 489
    assert code == 0 and inclusion["link"]["index"] == 489 and inclusion["treeSize"] == 703
    assert inclusion["link"]["hash"] == log.store.head("acme", "run-b").hash  # type: ignore[union-attr]
    code, consistency = log.cli("log-consistency", "--old", "300")
    assert code == 0 and (consistency["oldSize"], consistency["newSize"]) == (300, 703)

    api = LogApi(log.store, FileTileStore(log.tiles), "127.0.0.1", 0)
    api.start()
    try:
        base = f"http://127.0.0.1:{api.port}"
        leaf = inclusion["leafIndex"]
        args = ["-vkey", second["verifierKey"], "-origin", second["origin"], "-old", str(old)]
        code, go, err = tlogverify("-log", base, *args, "-leaf", str(leaf))
        assert code == 0, err
        with urllib.request.urlopen(
            f"{base}/v1/log/inclusion?tenant=acme&run=run-b&index=489"
        ) as r:
            served = json.loads(r.read())
        with urllib.request.urlopen(f"{base}/v1/log/consistency?old=300&new=703") as r:
            served_consistency = json.loads(r.read())
        with urllib.request.urlopen(f"{base}/tile/0/000") as r:
            assert r.headers["Cache-Control"].endswith("immutable") and len(r.read()) == 8192
    finally:
        api.stop()
    assert (go["size"], go["root"]) == (703, second["rootHash"])
    assert go["entries"] == 703
    assert go["inclusion"] == {"leafIndex": leaf, "proof": inclusion["proof"]}
    assert go["consistency"] == {"oldSize": 300, "proof": consistency["proof"]}
    assert served == inclusion and served_consistency == consistency

    # the folder itself, as a mirror would hold it
    code, from_folder, err = tlogverify("-log", str(log.tiles), "-vkey", second["verifierKey"])
    assert code == 0, err
    assert from_folder["root"] == second["rootHash"]
