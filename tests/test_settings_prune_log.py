"""Where retention logs what it pruned, as users set it: ``RUNTRAIL_PRUNE_LOG_URL`` in the
environment of its writers (``runtrail prune``, a service's retention timer) and of its reader
(the explorer's "pruned" panel). (The panel on the default log: test_ui_pruned.py; the
services' timers: test_privacy_retention_services.py.)"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.persistence import open_store
from runtrail.persistence.kinds import PRUNE_LOG
from runtrail.persistence.urls import sqlite_url
from runtrail.runtime import ServiceContext
from runtrail_services.capture.service import CaptureService
from runtrail_tools.cli.main import main
from tests.projection_support import Run
from tests.ui_stores import seed, serving
from tests.ui_support import get_page

TENANT = "acme"
TOKENS = {TENANT: "acme-token-0123456789"}
RUN = "run-old"


def _old_run() -> Run:
    """A run started long before any cutoff (a pass pruning older data may have taken it)."""
    run = Run(RUN, TENANT)
    old = "2020-01-01T00:00:00Z"
    run.add("run.accepted", {"goalRef": "g", "policyVersion": "p"}, occurred_at=old)
    run.add("run.succeeded", {"resultRef": "blob://r"}, occurred_at=old)
    return run


def _old_days(root: Path, count: int) -> None:
    for day in range(1, count + 1):
        folder = root / TENANT / f"2020-01-0{day}"
        folder.mkdir(parents=True)
        (folder / "capture-0.jsonl").write_text("{}\n")


def test_prunes_are_logged_where_the_environment_says_and_the_explorer_shows_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``RUNTRAIL_PRUNE_LOG_URL`` set, ``runtrail prune`` (one old capture day) and the
    capture service's retention timer (two old days) append their passes to that log, none to
    the state folder's ``prunes.db``, and the explorer's run page names both passes from it.
    If a writer ignored it, its pass would land in a file under its own state folder that the
    explorer (reading the shared log) never reads: content of the run would read ``[erased]``
    with nothing saying retention took it; if the explorer ignored it, the page would say
    "nothing of this run pruned"."""
    state, shared = tmp_path / "state", tmp_path / "shared"
    state.mkdir()
    shared.mkdir()
    log_url = sqlite_url(shared / "prunes.db")
    monkeypatch.setenv("RUNTRAIL_PRUNE_LOG_URL", log_url)
    by_hand, by_service = shared / "capture-a", shared / "capture-b"
    _old_days(by_hand, 1)
    _old_days(by_service, 2)

    capsys.readouterr()
    argv = ["prune", "--older-than", "1", "--capture-sink", by_hand.as_uri()]
    assert main([*argv, "--state-dir", str(state)]) == 0
    assert json.loads(capsys.readouterr().out) == {"capture": 1}

    monkeypatch.setenv("RUNTRAIL_RETENTION_POLICY", json.dumps({"capture": {"olderThanDays": 30}}))
    context = ServiceContext(
        settings=Settings(state_dir=state, events_topic="events"),
        options={"sink_url": by_service.as_uri()},
    )
    service = CaptureService(context)
    try:
        service.tick(int(time.time() * 1000))
    finally:
        service.close()
    assert not list((by_service / TENANT).iterdir())

    assert not (state / "prunes.db").exists(), "a prune was logged in the default log"
    log = open_store(PRUNE_LOG, log_url)
    try:
        assert sorted((f.store, f.deleted) for f in log.facts(TENANT)) == [
            ("capture", 1),
            ("capture", 2),
        ]
    finally:
        log.close()

    seed(state, [_old_run()])
    with serving(state, TOKENS, tmp_path / "ui.log", RUNTRAIL_PRUNE_LOG_URL=log_url) as url:
        page = get_page(f"{url}/runs/{RUN}", TOKENS[TENANT])
    counts = re.findall(r'<td class="count">([^<]*)</td>', page)
    panel = page[page.find('id="pruned"') :][:400]
    assert sorted(counts) == ["1 capture records files", "2 capture records files"], panel
    assert not (state / "prunes.db").exists(), "the explorer read the default prune log"
