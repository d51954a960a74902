"""What the run explorer's tests share: a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium), an explorer process of their own, and the user's
"other model" for live replay.

A missing browser skips the tests, or fails them when services are required (CI installs it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_fixture import services_required

CHROMIUM = ("chromium", "chromium-browser")
DRIVER = "chromedriver"


def _found(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def chrome() -> Any:
    """A headless Chromium through chromium-driver (skip, or fail in CI, when absent)."""
    binary, driver = _found(CHROMIUM), _found((DRIVER,))
    if binary is None or driver is None:
        message = "no chromium/chromium-driver (apt-get install chromium chromium-driver)"
        if services_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1440,1000")
    return webdriver.Chrome(service=Service(driver), options=options)


#: How long a page may take to show what a test waits for.
WAIT_S = 60


def wait(driver: Any, condition: Any) -> Any:
    """``condition(driver)`` once it is truthy; asked again while an element it reads is not
    there yet or was replaced between being found and being read (a live page re-renders)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, WAIT_S, ignored_exceptions=ignored).until(condition)


def sign_in(driver: Any, url: str, token: str) -> None:
    """Sign in through the login form the explorer redirects an anonymous visitor to."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/login")
    driver.delete_all_cookies()  # cookies are per host, not per port: forget other explorers'
    driver.get(url + "/runs")
    wait(driver, lambda d: d.find_elements(By.ID, "token"))  # redirected to the form
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    wait(driver, lambda d: d.find_elements(By.ID, "runs"))


def shoot(driver: Any, folder: Path, name: str) -> Path:
    """A screenshot in the test's folder (a page, not a blank)."""
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


@pytest.fixture(scope="session")
def _chromium() -> Iterator[list[Any]]:
    """The test process's one Chromium, started by the first test that asks for a browser
    (a start costs about a CPU-second; some thirty tests use one)."""
    held: list[Any] = []
    try:
        yield held
    finally:
        for driver in held:
            driver.quit()


def _fresh(driver: Any) -> bool:
    """Bring a used browser back to a new one's state: one tab, on a blank page, with no
    cookies and nothing cached (so a test sees no other test's sign-in or pages); False if
    it cannot be (crashed, stuck on a dialog)."""
    try:
        first, *others = driver.window_handles
        for handle in others:
            driver.switch_to.window(handle)
            driver.close()
        driver.switch_to.window(first)
        driver.get("about:blank")
        driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    except Exception:
        return False
    return True


@pytest.fixture
def browser(_chromium: list[Any]) -> Any:
    """A headless Chromium as new: the process's one, reset (a new one if it cannot be)."""
    if _chromium and not _fresh(_chromium[0]):
        with contextlib.suppress(Exception):  # a browser that crashed may not answer
            _chromium.pop().quit()
    if not _chromium:
        _chromium.append(chrome())
    return _chromium[0]


@contextmanager
def explorer(state_dir: Path, env: Mapping[str, str], *flags: str, log: Path) -> Iterator[str]:
    """``runtrail ui`` as a process of its own on a free port; yields its URL."""
    argv = [sys.executable, "-m", "runtrail_tools.cli.main", "ui", "--state-dir", str(state_dir)]
    argv += ["--port", "0", *flags]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(env))
    try:
        deadline = time.monotonic() + 60
        while True:
            found = re.search(r"runtrail ui: (http://\S+/)", log.read_text())
            if found:
                yield found.group(1).rstrip("/")
                break
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ui_env(state_dir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an explorer on a stack's state folder (no stray RUNTRAIL_*)."""
    env = {k: v for k, v in (base or os.environ).items() if not k.startswith("RUNTRAIL_")}
    env["RUNTRAIL_STATE_DIR"] = str(state_dir)
    return env


class OtherModel:
    """The operator's other model for live replay (seed 000 §7): answers every captured
    prompt in its own words, deterministically, so the diff has something to show."""

    def create(self, prompt: Any) -> dict[str, Any]:
        messages = prompt.get("messages", []) if isinstance(prompt, dict) else []
        return {
            "model": "other-model-2",
            "outputText": f"other-model-2 answers a prompt of {len(messages)} messages\nthe end",
        }


def other_model() -> OtherModel:
    return OtherModel()


def get_page(url: str, token: str) -> str:
    """The text of an explorer page or API answer, asked with ``token`` as a bearer; an error
    status fails the test, naming the URL and the start of the answer."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return str(answer.read().decode())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{url}: {exc.code} {exc.read()[:300]!r}") from None
