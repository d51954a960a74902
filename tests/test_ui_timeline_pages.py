"""A long run's timeline in pages, in headless Chromium: whole steps a page, every event on
exactly one page in chain order, a jump to the page holding a step (brought into view), and
a filter by event type that lists only that type, across the run.

The stores are built directly (``tests/ui_stores.py``), as in ``tests/test_ui_shape.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtrail_tools.ui.paging import PAGE_EVENTS
from tests.projection_support import Run
from tests.ui_stores import seed, serving
from tests.ui_support import shoot, sign_in, wait

TENANT = "acme"
TOKENS = {TENANT: "acme-token"}
T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
STEPS = 100


def at(ms: int) -> str:
    return (T0 + timedelta(milliseconds=ms)).isoformat().replace("+00:00", "Z")


def long_run(run_id: str) -> Run:
    """``STEPS`` steps of a model call (3 streamed chunks) and a tool call: ~9 events each."""
    run = Run(run_id, TENANT)
    run.add("run.accepted", {"goalRef": "goal://1", "policyVersion": "p-1"}, occurred_at=at(0))
    ms = 10
    for step in range(1, STEPS + 1):
        where = {"turn_id": "t1", "step": step}
        run.add("MODEL_REQUEST", {"prompt": {"messages": []}}, occurred_at=at(ms), **where)
        for text in ("a", "b", "c"):
            ms += 5
            run.add("MODEL_RESPONSE", {"message": text, "raw": None}, occurred_at=at(ms), **where)
        call = {"callId": f"c-{step}", "toolName": "t", "arguments": "{}", "type": None}
        run.add("TOOL_CALL", call, occurred_at=at(ms + 1), **where)
        result = {"callId": f"c-{step}", "toolName": "t", "output": "ok", "error": None}
        run.add("TOOL_RESULT", {**result, "ok": True, "failed": None, "trace": None},
                occurred_at=at(ms + 2), **where)  # fmt: skip
        run.add("STEP_END", {"reason": "tool_use"}, occurred_at=at(ms + 3), **where)
        ms += 10
    run.add("run.succeeded", {"resultRef": "result:1"}, occurred_at=at(ms))
    return run


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Run]]:
    root = tmp_path_factory.mktemp("ui-pages")
    state = root / "state"
    state.mkdir()
    run = long_run("long-1")
    seed(state, [run])
    with serving(state, TOKENS, root / "ui.log") as url:
        yield url, run


def shown(driver: Any) -> list[tuple[int, str, str]]:
    """(sequence, type, step) of every event row on the page."""
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#timeline li.event[data-seq]'))"
        ".map(function (li) { return [li.dataset.seq, li.dataset.type,"
        " li.closest('section.step').dataset.step]; });"
    )
    return [(int(seq), kind, step) for seq, kind, step in rows]


def test_every_event_on_one_page_in_order(
    served: tuple[str, Run], browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    url, run = served
    assert len(run.events) > 2 * PAGE_EVENTS  # three pages at least
    sign_in(browser, url, TOKENS[TENANT])
    browser.get(f"{url}/runs/{run.run_id}")
    seen: list[tuple[int, str, str]] = []
    pages = 0
    while True:
        wait(browser, lambda d: d.find_elements(By.ID, "timeline-page"))
        rows = shown(browser)
        pages += 1
        label = browser.find_element(By.ID, "timeline-page")
        assert label.get_attribute("data-page") == str(pages)
        assert f"{len(rows)} of {len(run.events)} events" in label.text
        assert len(rows) < PAGE_EVENTS + 10  # a page closes at the end of a step
        # a step is never split: it does not continue on the next page
        assert not seen or rows[0][2] != seen[-1][2] or rows[0][2] == ""
        seen += rows
        nxt = browser.find_elements(By.ID, "timeline-next")
        if not nxt:
            break
        nxt[0].click()
    assert pages == int(label.get_attribute("data-pages")) >= 3
    assert [seq for seq, _, _ in seen] == list(range(1, len(run.events) + 1))
    assert browser.find_element(By.ID, "event-count").text == str(len(run.events))
    shoot(browser, tmp_path, "last-page")


def test_jump_to_a_step_and_filter_by_type(
    served: tuple[str, Run], browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    url, run = served
    sign_in(browser, url, TOKENS[TENANT])
    browser.get(f"{url}/runs/{run.run_id}")
    wait(browser, lambda d: d.find_elements(By.ID, "jump-step"))
    browser.find_element(By.ID, "jump-step").send_keys("61")
    browser.find_element(By.ID, "timeline-go").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "section.step.jumped"))
    jumped = browser.find_element(By.CSS_SELECTOR, "section.step.jumped")
    assert jumped.get_attribute("data-step") == "61"
    top = browser.execute_script("return arguments[0].getBoundingClientRect().top;", jumped)
    assert -2 <= top < 200  # brought into view (sub-pixel above the top is in view)
    assert browser.find_element(By.ID, "timeline-page").get_attribute("data-page") != "1"
    expected = [e.sequence for e in run.events if e.step == 61]
    assert [seq for seq, _, step in shown(browser) if step == "61"] == expected
    shoot(browser, tmp_path, "jumped")

    Select(browser.find_element(By.ID, "event-type")).select_by_value("TOOL_RESULT")
    browser.find_element(By.ID, "jump-step").clear()
    browser.find_element(By.ID, "timeline-go").click()
    wait(browser, lambda d: "type=TOOL_RESULT" in d.current_url)
    rows = shown(browser)
    results = [e.sequence for e in run.events if e.type == "TOOL_RESULT"]
    assert [seq for seq, _, _ in rows] == results
    assert {kind for _, kind, _ in rows} == {"TOOL_RESULT"}
    assert (
        f"{len(results)} of {len(results)} events"
        in browser.find_element(By.ID, "timeline-page").text
    )
