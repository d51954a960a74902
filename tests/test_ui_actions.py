"""Acting from a run's page, in headless Chromium: approve, deny and request cancellation go
through a real command API with the signed-in tenant's token at the version the page
observed; a stale one is refused and the page says it in the CLI's words; "copy the CLI
command" gives the same command for a shell, which the CLI then answers the same way; a form
without this session's form token, or a bearer header, changes nothing.

The command API runs in this process on its own SQLite store (no broker); the explorer's
audit and projection stores are seeded with the events the command API wrote.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from runtrail.commands.client import CommandClient
from runtrail.commands.model import CommandRefusal
from runtrail.events import Event, validate_json_form
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import sqlite_url
from tests.commands_support import serving_command_api
from tests.ui_stores import seed, serving
from tests.ui_support import shoot, sign_in, wait

TENANT = "acme"
TOKENS = {TENANT: "acme-token", "globex": "globex-token"}
DIGEST = "sha256:" + "cd" * 32


@dataclass
class CommandRun:
    """A run the command API drives, in the shape ``ui_stores.seed`` takes."""

    run_id: str
    tenant: str = TENANT
    events: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class Served:
    url: str
    api: str
    #: the command API's store, which the explorer reads refusals from
    store: str

    def client(self) -> CommandClient:
        return CommandClient(self.api, TOKENS[TENANT])


def awaiting_approval(client: CommandClient, run_id: str) -> None:
    accepted = {"goalRef": "goal:1", "policyVersion": "p1"}
    assert client.send(run_id, "accept_run", accepted, expected_version=0).accepted
    wait_for = {"actionDigest": DIGEST, "reason": "deploy"}
    assert client.send(run_id, "require_approval", wait_for, expected_version=1).accepted


RUNS = ("act-approve", "act-stale", "act-deny", "act-cancel", "act-forms")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-actions")
    state = root / "state"
    state.mkdir()
    store = sqlite_url(root / "commands.db")
    with serving_command_api(store, TOKENS) as api:
        client = CommandClient(api, TOKENS[TENANT])
        for run_id in RUNS:
            awaiting_approval(client, run_id)
        runs = [
            CommandRun(run_id, events=[validate_json_form(e) for e in client.events(run_id)])
            for run_id in RUNS
        ]
        seed(state, runs)
        flags = ("--command-url", api, "--command-store", store)
        with serving(state, TOKENS, root / "ui.log", *flags) as url:
            yield Served(url, api, store)


def open_run(driver: Any, served: Served, run_id: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{served.url}/runs/{run_id}")
    wait(driver, lambda d: d.find_elements(By.ID, "actions"))


def act(driver: Any, verb: str, by: str, reason: str = "") -> str:
    """Click the verb's button; the outcome the page shows after it."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "command-by")
    box.clear()
    box.send_keys(by)
    if reason:
        driver.find_element(By.ID, "command-reason").send_keys(reason)
    driver.find_element(By.ID, f"do-{verb}").click()
    wait(driver, lambda d: d.find_elements(By.ID, "command-outcome"))
    return str(driver.find_element(By.CSS_SELECTOR, "#command-outcome b").text)


def test_approve_deny_and_cancel_go_through_the_command_api(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    client = served.client()
    sign_in(browser, served.url, TOKENS[TENANT])
    open_run(browser, served, "act-approve")
    assert browser.find_element(By.ID, "observed-version").text == "2"
    assert browser.find_element(By.ID, "observed-status").text == "awaiting_approval"
    shoot(browser, tmp_path, "awaiting-approval")
    assert act(browser, "approve", "alice") == "accepted at version 3"
    shoot(browser, tmp_path, "approved")
    run = client.run("act-approve")
    # back to the status before the wait (accepted, never executing: "received")
    assert run is not None and run["version"] == 3 and run["status"] == "received"
    granted = client.events("act-approve")[-1]
    assert granted["type"] == "run.approval_granted"
    assert granted["actor"] == {"kind": "operator", "id": "alice"}
    assert granted["data"] == {"actionDigest": DIGEST, "approvedBy": "alice"}
    # the page now observes the new version: approve is no longer offered
    assert browser.find_element(By.ID, "observed-version").text == "3"
    assert not browser.find_elements(By.ID, "do-approve")

    open_run(browser, served, "act-deny")
    assert act(browser, "deny", "bob", "not today") == "accepted at version 3"
    denied = client.events("act-deny")[-1]
    assert denied["type"] == "run.failed" and denied["actor"] == {"kind": "operator", "id": "bob"}
    assert "denied by bob" in denied["data"]["reason"]

    open_run(browser, served, "act-cancel")
    assert act(browser, "cancel", "carol", "wrong target") == "accepted at version 3"
    requested = client.events("act-cancel")[-1]
    assert requested["type"] == "run.cancellation_requested"
    assert requested["data"]["requestedBy"] == "carol"
    shoot(browser, tmp_path, "cancel-requested")


def test_a_stale_version_is_refused_as_the_cli_says_and_the_copied_command_agrees(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    client = served.client()
    sign_in(browser, served.url, TOKENS[TENANT])
    open_run(browser, served, "act-stale")
    assert browser.find_element(By.ID, "observed-version").text == "2"
    copied = browser.find_element(By.ID, "cli-approve").text
    assert copied == (
        f"runtrail command approve act-stale --url {served.api} --expected-version 2 "
        f"--by operator --digest {DIGEST}"
    )
    browser.find_element(By.CSS_SELECTOR, '.copy-cli[data-for="cli-approve"]').click()
    wait(browser, lambda d: d.find_element(By.ID, "copy-state").text)
    state = browser.find_element(By.ID, "copy-state").text
    assert state in (f"copied: {copied}", "selected: press Ctrl+C")
    if state.startswith("selected"):
        assert browser.execute_script("return window.getSelection().toString()") == copied
    # another operator, who observed the same version, acts first
    assert client.approve("act-stale", DIGEST, "dave", expected_version=2).accepted
    shown = act(browser, "approve", "erin")
    shoot(browser, tmp_path, "stale-refused")
    assert shown.startswith("refused (stale): ")
    answer = json.loads(
        browser.find_element(By.CSS_SELECTOR, "#command-outcome pre").get_attribute("textContent")
    )
    assert answer["accepted"] is False and answer["code"] == "stale" and answer["version"] == 3
    # the refusal changed nothing in the run, yet its page lists it, as the store kept it
    rows = browser.find_elements(By.CSS_SELECTOR, "#refusals tr.refusal")
    kept = refusals(served, "act-stale")
    assert len(rows) == len(kept) == 1 and rows[0].get_attribute("data-code") == "stale"
    assert kept[0].actor.id == "erin" and (kept[0].expected_version, kept[0].version) == (2, 3)
    assert f"{kept[0].name} by erin" in rows[0].text and "seen v2, run at v3" in rows[0].text
    assert kept[0].reason in rows[0].text
    # the copied command, run in a shell, is refused with the same line
    env = {**os.environ, "RUNTRAIL_COMMAND_TOKEN": TOKENS[TENANT]}
    argv = [sys.executable, "-m", "runtrail_tools.cli.main", *shlex.split(copied)[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == shown
    assert json.loads(done.stdout)["code"] == "stale"
    assert [e["actor"]["id"] for e in client.events("act-stale")[2:]] == ["dave"]
    open_run(browser, served, "act-stale")  # the shell's refusal is on the page too
    assert browser.find_element(By.ID, "refusal-count").text == "2"
    assert [r.actor.id for r in refusals(served, "act-stale")] == ["erin", "operator"]
    shoot(browser, tmp_path, "refusals")


def refusals(served: Served, run_id: str) -> list[CommandRefusal]:
    store = open_store(COMMAND_EVENTS, served.store)
    try:
        return store.refusals(TENANT, run_id)
    finally:
        store.close()


def post(url: str, path: str, body: dict[str, str], headers: dict[str, str]) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request(
            "POST",
            path,
            body=urlencode(body),
            headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
        )
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_form_without_the_sessions_token_changes_nothing(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    client = served.client()
    before = client.run("act-forms")
    sign_in(browser, served.url, TOKENS[TENANT])
    open_run(browser, served, "act-forms")
    cookie = browser.get_cookie("runtrail_session")["value"]
    form_token = browser.find_element(By.NAME, "csrf").get_attribute("value")
    version = browser.find_element(By.NAME, "version").get_attribute("value")
    form = {"verb": "cancel", "version": version, "by": "mallory", "digest": ""}
    path = "/runs/act-forms/commands"
    session = {"Cookie": f"runtrail_session={cookie}"}
    assert post(served.url, path, form, session) == 403  # no form token
    assert post(served.url, path, {**form, "csrf": "forged"}, session) == 403
    assert post(served.url, path, {**form, "csrf": cookie}, session) == 403  # not the cookie
    bearer = {"Authorization": f"Bearer {TOKENS[TENANT]}"}
    assert post(served.url, path, {**form, "csrf": form_token}, bearer) == 403
    assert client.run("act-forms") == before
    # another tenant's session cannot act on this tenant's run (its own token, no such run)
    sign_in(browser, served.url, TOKENS["globex"])
    browser.get(f"{served.url}/runs/act-forms")
    assert not browser.find_elements(By.ID, "actions")
    other = browser.get_cookie("runtrail_session")["value"]
    browser.get(f"{served.url}/runs")
    globex_form = {**form, "csrf": form_token}
    status = post(served.url, path, globex_form, {"Cookie": f"runtrail_session={other}"})
    assert status == 403  # the form token is acme's session's, not globex's
    assert client.run("act-forms") == before
