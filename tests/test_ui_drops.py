"""The run page's "not recorded" panel, in headless Chromium: what OTLP ingest did not record
of this run, by reason, read from the drops store the receivers and mappers write (here
written with the store's own writer, as a receiver does; the receiver and mapper paths into
it are tests/test_otlp_ingest.py's and tests/test_otlp_scale_out.py's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtrail.drops.tally import NO_RUN, DropTally
from runtrail.persistence import open_store
from runtrail.persistence.kinds import OTLP_DROPS
from runtrail.persistence.urls import sqlite_url
from tests.projection_support import full_run
from tests.ui_stores import seed, serving
from tests.ui_support import shoot, sign_in, wait

TENANT = "acme"
TOKENS = {TENANT: "acme-token"}
DROPPED = "5b8efff798038103d269b633813fc60c"
CLEAN = "6c9f0000798038103d269b633813fc6d"


def test_a_runs_page_lists_what_was_not_recorded_of_it(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    state = tmp_path / "state"
    state.mkdir()
    seed(state, [full_run(DROPPED, TENANT), full_run(CLEAN, TENANT)])
    store = open_store(OTLP_DROPS, sqlite_url(state / "otlp-drops.db"))
    try:
        tally = DropTally()
        tally.add(DROPPED, "not-genai", "GET /weather", 3)
        tally.add(DROPPED, "model-without-content", "chat gpt-x")
        tally.add(NO_RUN, "log-without-span", "gen_ai.choice")
        store.add(TENANT, tally)
        other = DropTally()
        other.add(CLEAN, "late-span", "chat")  # another tenant's trace of the same ID
        store.add("globex", other)
    finally:
        store.close()
    with serving(state, TOKENS, tmp_path / "ui.log") as url:
        sign_in(browser, url, TOKENS[TENANT])
        browser.get(f"{url}/runs/{DROPPED}")
        wait(browser, lambda d: d.find_elements(By.ID, "not-recorded"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#not-recorded tr.drop")
        seen = [[c.text for c in row.find_elements(By.TAG_NAME, "td")][:3] for row in rows]
        assert sorted(seen) == [
            ["model-without-content (recorded incomplete)", "1", "chat gpt-x"],
            ["not-genai", "3", "GET /weather"],
        ]
        panel = browser.find_element(By.ID, "not-recorded")
        browser.execute_script("arguments[0].scrollIntoView()", panel)
        shoot(browser, tmp_path, "not-recorded")
        browser.get(f"{url}/runs/{CLEAN}")
        panel = wait(browser, lambda d: d.find_elements(By.ID, "not-recorded"))[0]
        assert panel.find_elements(By.CSS_SELECTOR, "tr.drop") == []
        assert "nothing dropped" in panel.text
