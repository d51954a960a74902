"""Finding a run in the explorer's list, in headless Chromium, held against the projection
store's own answer to the same query: newest first by default, a total, pages forward and
back, a substring search over run, session, model and tool names, the status, "has errors"
and time-range filters, and sortable columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection.store import RunQuery
from tests.projection_support import listed_run
from tests.ui_stores import seed, serving
from tests.ui_support import shoot, sign_in, wait

TENANT = "acme"
TOKENS = {TENANT: "acme-token", "globex": "globex-token"}
PAGE = 15


@dataclass(frozen=True)
class Served:
    url: str
    state: Path

    def expected(self, query: RunQuery) -> tuple[list[str], int]:
        """The store's answer: every matching run in order, and the total."""
        store = open_store(PROJECTIONS, sqlite_url(self.state / "projection.db"))
        try:
            found = store.search(query)
        finally:
            store.close()
        return [r.run_id for r in found.rows], found.total


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-list")
    state = root / "state"
    state.mkdir()
    seed(state, [listed_run(n, TENANT) for n in range(1, 41)] + [listed_run(5, "globex")])
    with serving(state, TOKENS, root / "ui.log", RUNTRAIL_UI_PAGE_SIZE=str(PAGE)) as url:
        yield Served(url, state)


def shown(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [r.get_attribute("data-run") for r in driver.find_elements(By.CSS_SELECTOR, "tr.run")]


def every_page(driver: Any) -> list[str]:
    """The runs of this page and of every page after it; then back to the first."""
    from selenium.webdriver.common.by import By

    pages = [shown(driver)]
    while following := driver.find_elements(By.ID, "next-page"):
        following[0].click()
        pages.append(shown(driver))
    assert all(len(p) == PAGE for p in pages[:-1])
    back = [shown(driver)]
    while previous := driver.find_elements(By.ID, "prev-page"):
        previous[0].click()
        back.insert(0, shown(driver))
    assert back == pages  # the same pages, backwards
    return [run for page in pages for run in page]


def test_the_list_finds_filters_orders_and_pages(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, served.url, TOKENS[TENANT])
    # newest first, a total, and pages both ways that add up to the store's whole list
    everyone, total = served.expected(RunQuery(TENANT, limit=1000))
    assert total == 40 and everyone[0] == "run-040"
    assert browser.find_element(By.ID, "total").text == "40"
    assert every_page(browser) == everyone
    shoot(browser, tmp_path, "runs-newest-first")

    # a model name, typed as the user types it (any case): found by substring
    browser.find_element(By.ID, "search").send_keys("HAIKU")
    browser.find_element(By.ID, "filter").click()
    wait(browser, lambda d: "q=HAIKU" in d.current_url)
    haiku, total = served.expected(RunQuery(TENANT, text="haiku", limit=1000))
    assert total == 20 and browser.find_element(By.ID, "total").text == "20"
    assert every_page(browser) == haiku == [f"run-{n:03d}" for n in range(40, 0, -2)]
    shoot(browser, tmp_path, "runs-search")

    # a tool name, and the session, and a part of the run ID
    for text in ("tool_3", "sess-1", "n-00"):
        browser.get(f"{served.url}/runs?{urlencode({'q': text})}")
        assert every_page(browser) == served.expected(RunQuery(TENANT, text=text, limit=1000))[0]
        assert browser.find_element(By.ID, "search").get_attribute("value") == text

    # has errors, with a search, by start, oldest first
    browser.get(f"{served.url}/runs?q=gpt&errors=1&sort=started&dir=asc")
    assert browser.find_element(By.ID, "errors").is_selected()
    assert every_page(browser) == [f"run-{n:03d}" for n in (3, 9, 15, 21, 27, 33, 39)]

    # a status, and a time range (UTC, as the form says)
    browser.get(f"{served.url}/runs?status=received")
    assert every_page(browser) == served.expected(RunQuery(TENANT, status="received"))[0]
    browser.get(f"{served.url}/runs?since=2026-11-29T10:10&until=2026-11-29T10:12")
    assert shown(browser) == ["run-012", "run-011", "run-010"]
    assert browser.find_element(By.ID, "since").get_attribute("value") == "2026-11-29T10:10"
    shoot(browser, tmp_path, "runs-time-range")

    # a column header sorts; a second click turns the direction
    browser.get(f"{served.url}/runs")
    browser.find_element(By.CSS_SELECTOR, "th a.sort[data-sort=events]").click()
    by_events, _ = served.expected(RunQuery(TENANT, sort="events", limit=1000))
    assert every_page(browser) == by_events
    browser.find_element(By.CSS_SELECTOR, "th a.sort[data-sort=events]").click()
    ascending, _ = served.expected(RunQuery(TENANT, sort="events", descending=False, limit=1000))
    assert every_page(browser) == ascending == list(reversed(by_events))
    assert "▲" in browser.find_element(By.CSS_SELECTOR, "th a.sort[data-sort=events]").text
    shoot(browser, tmp_path, "runs-by-events")

    # another tenant's run of the same name is neither listed nor counted
    browser.get(f"{served.url}/runs?q=run-005")
    assert shown(browser) == ["run-005"] and browser.find_element(By.ID, "total").text == "1"
