"""The explorer's own defences, against a real explorer process and in headless Chromium: the
security headers on every response (and the page still working under its policy while an
injected inline script does not run), a session cookie that is not the token and dies at
logout, the Host check, and a proof panel that counts only the signed-in tenant's runs.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from runtrail_tools.ui.auth import Sessions
from runtrail_tools.ui.guard import CSP, allowed_hosts, host_name
from tests.ui_stores import seed, serving, sign_tree_head, small_run
from tests.ui_support import shoot, sign_in, wait

TOKENS = {"acme": "acme-token", "globex": "globex-token"}


@dataclass(frozen=True)
class Explorer:
    url: str
    runs: dict[str, list[str]]

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Explorer]:
    root = tmp_path_factory.mktemp("ui-hardening")
    state = root / "state"
    state.mkdir()
    runs = {"acme": ["a-1", "a-2"], "globex": ["g-1", "g-2", "g-3"]}
    seed(state, [small_run(r, tenant) for tenant, ids in runs.items() for r in ids])
    sign_tree_head(state)
    with serving(state, TOKENS, root / "ui.log") as url:
        yield Explorer(url, runs)


def call(
    served: Explorer, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    conn.request(method, path, headers=headers or {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def test_every_response_carries_the_security_headers(served: Explorer) -> None:
    bearer = {"Authorization": f"Bearer {TOKENS['acme']}"}
    for path, method, headers, status in (
        ("/login", "GET", {}, 200),
        ("/runs", "GET", {}, 303),
        ("/runs", "GET", bearer, 200),
        ("/runs/a-1", "GET", bearer, 200),
        ("/runs/a-1/verify", "POST", {}, 401),
        ("/runs/a-1/export.jsonl", "GET", bearer, 200),
        ("/runs/nope", "GET", bearer, 404),
        ("/static/app.js", "GET", {}, 200),
    ):
        response = call(served, path, method, headers)
        assert response.status == status, path
        assert response.getheader("Content-Security-Policy") == CSP, path
        assert "frame-ancestors 'none'" in CSP and "script-src 'self'" in CSP
        assert response.getheader("X-Frame-Options") == "DENY", path
        assert response.getheader("X-Content-Type-Options") == "nosniff", path


def test_the_page_works_under_its_policy_and_an_injected_script_does_not_run(
    served: Explorer, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, served.url, TOKENS["acme"])
    browser.get(f"{served.url}/runs/a-1")
    browser.find_element(By.ID, "verify").click()  # the package's own script runs
    wait(browser, lambda d: "valid" in d.find_element(By.ID, "verdict").text)
    # what an escaping slip would let in: an inline script, an inline handler
    browser.execute_script(
        "var s = document.createElement('script'); s.textContent = 'window.injected = 1';"
        "document.body.appendChild(s);"
        "var i = document.createElement('img'); i.setAttribute('onerror', 'window.handled = 1');"
        "i.src = 'data:,x'; document.body.appendChild(i);"
    )
    wait(
        browser,
        lambda d: d.execute_script("return document.images[document.images.length-1].complete"),
    )
    assert browser.execute_script("return [window.injected, window.handled]") == [None, None]
    shoot(browser, tmp_path, "run-under-csp")


def test_the_cookie_is_a_session_not_the_token_and_logout_ends_it(
    served: Explorer, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, served.url, TOKENS["acme"])
    cookie = browser.get_cookie("runtrail_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert TOKENS["acme"] not in cookie["value"] and len(cookie["value"]) >= 40
    assert browser.get_cookie("runtrail_token") is None
    copied = {"Cookie": f"runtrail_session={cookie['value']}"}
    assert call(served, "/runs", headers=copied).status == 200  # the copy works while signed in
    browser.find_element(By.CSS_SELECTOR, "header button[type=submit]").click()  # log out
    wait(browser, lambda d: d.find_elements(By.ID, "token"))
    shoot(browser, tmp_path, "signed-out")
    # the server forgot the session: the copied cookie opens nothing any more
    assert call(served, "/runs", headers=copied).status == 303
    assert call(served, "/runs/a-1/verify", "POST", copied).status == 401
    assert call(served, "/runs/a-1/export.jsonl", headers=copied).status == 401


def test_a_foreign_host_header_is_refused(served: Explorer) -> None:
    bearer = {"Authorization": f"Bearer {TOKENS['acme']}"}
    for host in ("evil.example", f"evil.example:{served.port}", "127.0.0.2", ""):
        response = call(served, "/runs", headers={**bearer, "Host": host})
        assert response.status == 400, host
        assert response.getheader("X-Frame-Options") == "DENY"
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", "localhost"):
        assert call(served, "/runs", headers={**bearer, "Host": host}).status == 200, host


def test_the_checkpoint_counts_only_the_tenants_runs(
    served: Explorer, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    everyone = sum(len(ids) for ids in served.runs.values())
    for tenant in ("acme", "globex"):
        sign_in(browser, served.url, TOKENS[tenant])
        browser.get(f"{served.url}/runs/{quote(served.runs[tenant][0])}")
        shown = browser.find_element(By.ID, "tree-head-id").text
        assert f"{len(served.runs[tenant])} of your runs" in shown, shown
        assert f"{everyone} runs" not in shown
        assert browser.find_element(By.ID, "inclusion").text.startswith("proof checks")
    shoot(browser, tmp_path, "checkpoint")


# --- the pieces on their own --------------------------------------------------------------
def test_hosts_follow_the_bound_address() -> None:
    assert allowed_hosts("127.0.0.1") == frozenset({"127.0.0.1", "localhost", "::1"})
    assert allowed_hosts("::1") == frozenset({"127.0.0.1", "localhost", "::1"})
    assert allowed_hosts("10.1.2.3") == frozenset({"10.1.2.3"})
    assert allowed_hosts("10.1.2.3", ["Runs.Example"]) == frozenset({"10.1.2.3", "runs.example"})
    assert allowed_hosts("explorer.internal") == frozenset({"explorer.internal"})
    assert allowed_hosts("0.0.0.0") is None and allowed_hosts("::") is None
    assert allowed_hosts("0.0.0.0", ["runs.example"]) == frozenset({"runs.example"})
    assert host_name("[::1]:9480") == "::1"
    assert host_name("LocalHost:80") == "localhost"
    assert host_name("") is None


def test_a_session_expires_and_a_closed_one_is_gone() -> None:
    now = [100.0]
    sessions = Sessions(lifetime_s=10, clock=lambda: now[0])
    first, second = sessions.open("acme"), sessions.open("acme")
    assert first != second and sessions.tenant(first) == "acme"
    sessions.close(first)
    assert sessions.tenant(first) is None and sessions.tenant(second) == "acme"
    now[0] = 111.0
    assert sessions.tenant(second) is None
    assert sessions.tenant("made-up") is None
