"""The run page's "pruned" panel, in headless Chromium: ``runtrail prune`` records each pass
that deleted something in the prune log, and the page of a run started before the pass's cutoff
names the store, the cutoff and when it was pruned; a run started after it shows nothing
pruned. (The services write the same log through their retention timers:
tests/test_privacy_retention_services.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.projection_support import Run, full_run
from tests.ui_stores import seed, serving
from tests.ui_support import shoot, sign_in, wait

TENANT = "acme"
TOKENS = {TENANT: "acme-token"}
PRUNED = "run-pruned"
LATER = "run-later"


def test_a_pruned_runs_page_says_what_was_pruned_and_when(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    state = tmp_path / "state"
    state.mkdir()
    later = Run(LATER, TENANT)
    later.add(
        "run.accepted", {"goalRef": "g", "policyVersion": "p"}, occurred_at="2999-01-01T00:00:00Z"
    )
    seed(state, [full_run(PRUNED, TENANT), later])  # full_run started 2026-11-29
    old_day = state / "capture" / TENANT / "2020-01-01"
    old_day.mkdir(parents=True)
    (old_day / "records.jsonl").write_text("{}\n")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "runtrail_tools.cli.main", "prune", "--older-than", "1"),
            *("--capture-sink", (state / "capture").as_uri()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "RUNTRAIL_STATE_DIR": str(state)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"capture": 1}

    with serving(state, TOKENS, tmp_path / "ui.log") as url:
        sign_in(browser, url, TOKENS[TENANT])
        browser.get(f"{url}/runs/{PRUNED}")
        wait(browser, lambda d: d.find_elements(By.ID, "pruned"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#pruned tr.prune")
        cells = [[c.text for c in row.find_elements(By.TAG_NAME, "td")] for row in rows]
        assert len(cells) == 1 and cells[0][0] == "capture", cells
        assert cells[0][1].startswith("older than 20") and cells[0][2].endswith("UTC")
        assert cells[0][3] == "1 capture records files"
        panel = browser.find_element(By.ID, "pruned")
        browser.execute_script("arguments[0].scrollIntoView()", panel)
        shoot(browser, tmp_path, "pruned")
        browser.get(f"{url}/runs/{LATER}")
        panel = wait(browser, lambda d: d.find_elements(By.ID, "pruned"))[0]
        assert panel.find_elements(By.CSS_SELECTOR, "tr.prune") == []
        assert "nothing of this run pruned" in panel.text
