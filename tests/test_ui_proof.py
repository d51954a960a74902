"""The proof panel says only what was checked, in one numbering, in headless Chromium: links
are numbered from 1 on the page (row ``#N`` is "link N" in the verdict; the API's index is
0-based); after a failed verify the run head's inclusion is not called valid; and the runs
list tells "verified at T" from "sealed, not verified".

The stores are built directly (``tests/ui_stores.py``); the explorer reads a copy of the audit
store with one event edited behind the store's back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.projection_support import Run
from tests.ui_stores import seed, serving, sign_tree_head, tampered_copy
from tests.ui_support import shoot, sign_in, wait

TENANT = "acme"
TOKENS = {TENANT: "acme-token"}


def steps_run(run_id: str, steps: int) -> Run:
    run = Run(run_id, TENANT)
    run.add("run.accepted", {"goalRef": "goal://1", "policyVersion": "p-1"})
    for step in range(1, steps + 1):
        turn = f"turn-{step}"
        run.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id=turn, step=step)
        run.add("MODEL_RESPONSE", {"message": f"m{step}", "raw": None}, turn_id=turn, step=step)
        run.add("STEP_END", {"reason": "end_turn"}, turn_id=turn, step=step)
    return run


@dataclass(frozen=True)
class Served:
    url: str
    good: str
    bad: str
    #: 0-based index of the edited link of ``bad``
    edited: int
    length: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-proof")
    state = root / "state"
    state.mkdir()
    good, bad = steps_run("proof-good", 4), steps_run("proof-bad", 4)
    seed(state, [good, bad])
    sign_tree_head(state)
    copy = root / "audit-copy.db"
    edited = tampered_copy(state, copy, TENANT, bad.run_id)
    flags = ("--audit-store", f"sqlite:///{copy}")
    with serving(state, TOKENS, root / "ui.log", *flags) as url:
        yield Served(url, good.run_id, bad.run_id, edited, len(bad.events))


def audit_cells(driver: Any) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    return {
        row.get_attribute("data-run"): row.find_elements(By.TAG_NAME, "td")[9].text
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.run")
    }


def verify_on_page(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "verify").click()
    wait(driver, lambda d: d.find_element(By.ID, "verdict").text not in ("", "verifying…"))
    return str(driver.find_element(By.ID, "verdict").text)


def test_one_numbering_and_nothing_called_valid_that_did_not_verify(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, served.url, TOKENS[TENANT])
    n = served.length
    assert audit_cells(browser) == {
        served.good: f"sealed {n}/{n} · not verified",
        served.bad: f"sealed {n}/{n} · not verified",
    }

    # the tampered run: every row numbered from 1, its index one less
    browser.get(f"{served.url}/runs/{served.bad}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline li.event[data-index]")
    assert [r.find_element(By.CSS_SELECTOR, ".link-no").text for r in rows] == [
        f"#{int(r.get_attribute('data-index')) + 1}" for r in rows
    ]
    assert [r.find_element(By.CSS_SELECTOR, ".link-no").text for r in rows] == [
        f"#{k}" for k in range(1, n + 1)
    ]
    inclusion = browser.find_element(By.ID, "inclusion")
    assert (
        inclusion.text == f"proof checks for the head of length {n}; verify the chain to rely on it"
    )
    number = served.edited + 1
    assert verify_on_page(browser).startswith(f"INVALID at link {number} (hash mismatch)")
    broken = browser.find_element(By.CSS_SELECTOR, ".event.broken")
    assert broken.find_element(By.CSS_SELECTOR, ".link-no").text == f"#{number}"
    assert f"first broken link (#{number})" in broken.text
    inclusion = browser.find_element(By.ID, "inclusion")
    assert inclusion.text.startswith(f"not valid: the chain failed verification at link {number}")
    assert inclusion.get_attribute("class") == "bad"
    shoot(browser, tmp_path, "proof-invalid")

    # the API keeps its 0-based index, and says the same of the inclusion
    token = {"Authorization": f"Bearer {TOKENS[TENANT]}"}
    verdict = browser.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', headers: arguments[1]})"
        ".then(function (r) { return r.json(); }).then(done);",
        f"{served.url}/runs/{served.bad}/verify",
        token,
    )
    assert verdict["firstBrokenIndex"] == served.edited and verdict["valid"] is False
    assert verdict["inclusion"]["valid"] is False

    # the intact run verifies, and only then is its head's inclusion called valid
    browser.get(f"{served.url}/runs/{served.good}")
    assert verify_on_page(browser) == f"chain valid: {n} links"
    inclusion = browser.find_element(By.ID, "inclusion")
    assert inclusion.text.startswith(f"valid: the verified chain's first {n} links are the head")
    assert inclusion.get_attribute("class") == "ok"

    # the list now says who was verified, when, and what it found
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    browser.get(f"{served.url}/runs")
    cells = audit_cells(browser)
    assert cells[served.bad].startswith(f"INVALID at link {number} (")
    assert cells[served.good].startswith(f"verified {n}/{n} at ")
    at = datetime.fromisoformat(cells[served.good].split(" at ", 1)[1]).replace(tzinfo=UTC)
    assert before <= at <= datetime.now(UTC)
    shoot(browser, tmp_path, "runs-verified")
