"""The run explorer in a real browser, on the demo's runs, against the real services.

One stack (``DevStack``: every service as its own process, and the explorer ``dev up`` starts
beside them) on the session's broker; the demo runs once as a user runs it. Each test then
drives headless Chromium through the pages and holds what it shows against the stores the
services wrote: the projection (runs list), the audit chain and the capture records
(timeline), the audit verdict (proof), and, for a tampered copy of the audit store, the first
broken link. Another tenant's token must get nothing of it. Screenshots go to each test's
temporary folder.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from runtrail.config import Settings
from runtrail.projection.store import RunQuery
from runtrail.runtime.registry import SERVICES
from runtrail_tools.demo.replay_model import ReplayModel
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import DevStack, StackOptions
from runtrail_tools.devstack.state import StackState
from tests.support import stack_settings
from tests.test_demo_e2e import Printed, parse_runs
from tests.ui_stores import tampered_copy
from tests.ui_support import explorer, shoot, sign_in, ui_env, wait

pytestmark = [pytest.mark.kafka]


@dataclass(frozen=True)
class DemoStack:
    state: StackState
    state_dir: Path
    runs: dict[str, Printed]
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        assert self.state.ui_url is not None
        return self.state.ui_url.rstrip("/")

    def runs_of(self, tenant: str) -> list[Printed]:
        return [r for r in self.runs.values() if r.tenant == tenant]


@pytest.fixture(scope="module")
def demo(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoStack]:
    root = tmp_path_factory.mktemp("ui-demo")
    prefix = f"ui-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        root / "state",
        prefix,
        partitions=3,
    )
    options = StackOptions(
        port_base=find_free_base(SERVICES), manage_broker=False, group_prefix=prefix
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        state = dev.up()
        assert state.ui is not None and state.ui_url is not None
        env = ui_env(Path(state.state_dir))
        env["RUNTRAIL_SPOOL_DIR"] = str(root / "spool")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "runtrail_tools.cli.main",
                "demo",
                "--state-dir",
                state.state_dir,
            ],
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert f"  open          {state.ui_url}" in done.stdout  # the demo prints its URL
        assert state.tokens_file is not None
        tokens = json.loads(Path(state.tokens_file).read_text())
        yield DemoStack(state, Path(state.state_dir), parse_runs(done.stdout), tokens)
    finally:
        assert dev.down() == []


def stores(state_dir: Path) -> tuple[Any, Any]:
    from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store

    audit = open_store(AUDIT_LINKS, f"sqlite:///{state_dir / 'audit.db'}")
    projections = open_store(PROJECTIONS, f"sqlite:///{state_dir / 'projection.db'}")
    return audit, projections


def run_url(base: str, run_id: str) -> str:
    return f"{base}/runs/{quote(run_id, safe='')}"


def test_runs_list_and_timeline_match_the_stores(
    demo: DemoStack, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    from runtrail.capture.reader import iter_records

    tenant = "acme"
    sign_in(browser, demo.url, demo.tokens[tenant])
    assert browser.find_element(By.ID, "tenant").text == tenant
    shoot(browser, tmp_path, "runs")
    audit, projections = stores(demo.state_dir)
    try:
        listed = {
            row.get_attribute("data-run"): row
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.run")
        }
        expected = {r.run_id for r in demo.runs_of(tenant)}
        assert set(listed) == {r.run_id for r in projections.list(tenant=tenant)}
        assert expected <= set(listed)  # the demo's runs, and any another test added
        for run_id, row in listed.items():
            stored = projections.get(tenant, run_id)
            assert stored is not None and stored.state is not None
            cells = row.find_elements(By.TAG_NAME, "td")
            assert cells[1].text.split()[0] == stored.status
            assert cells[2].text == str(stored.version)
            assert row.find_element(By.CSS_SELECTOR, "[data-col=model]").text == str(
                stored.state.model_nodes
            )
            assert row.find_element(By.CSS_SELECTOR, "[data-col=tool]").text == str(
                stored.state.tool_nodes
            )
            # nobody verified it here yet: sealed is not "verified"
            assert cells[9].text == f"sealed {stored.version}/{stored.version} · not verified"
            assert cells[3].text and cells[4].text  # last update and duration from the chain

        # search by run ID and filter by status narrow the list to what the store says
        # (the research run: the deploy run is command-driven, it records no call nodes)
        some = next(r.run_id for r in demo.runs_of(tenant) if r.key == "research")
        browser.get(f"{demo.url}/runs?q={quote(some)}")
        found = [
            r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")
        ]
        assert found == [some]
        status = projections.get(tenant, some).status
        browser.get(f"{demo.url}/runs?status={status}")
        found = [
            r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")
        ]
        assert set(found) == {r.run_id for r in projections.list(status, tenant)}

        # a run's timeline: every sealed event, in chain order, and every captured node
        browser.get(f"{demo.url}/runs")
        browser.find_element(By.LINK_TEXT, some).click()
        wait(browser, lambda d: d.find_elements(By.ID, "timeline"))
        assert browser.find_element(By.ID, "run-id").text == some
        chain = audit.load_chain(tenant, some)
        events = browser.find_elements(By.CSS_SELECTOR, "#timeline li.event[data-index]")
        assert [int(li.get_attribute("data-index")) for li in events] == [
            link.index for link in chain
        ]
        assert [li.get_attribute("data-seq") for li in events] == [
            str(link.event["sequence"]) for link in chain
        ]
        assert [li.get_attribute("data-type") for li in events] == [
            link.event["type"] for link in chain
        ]
        records = list(iter_records((demo.state_dir / "capture").as_uri(), some, None, tenant))
        shown = [
            n.get_attribute("data-record") for n in browser.find_elements(By.CSS_SELECTOR, ".node")
        ]
        assert sorted(shown) == sorted(r.record_id for r in records) and records
        # grouped into steps: each step section holds its own step's events only
        for section in browser.find_elements(By.CSS_SELECTOR, "section.step[data-step]"):
            step = section.get_attribute("data-step")
            for li in section.find_elements(By.CSS_SELECTOR, "li.event"):
                link = chain[int(li.get_attribute("data-index"))]
                assert (
                    str(link.event.get("step") if link.event.get("step") is not None else "")
                    == step
                )
        # an event's data is read when opened: the event exactly as the store sealed it
        middle = events[len(events) // 2]
        middle.find_element(By.TAG_NAME, "summary").click()
        wait(
            browser, lambda d: middle.find_element(By.TAG_NAME, "pre").text not in ("", "loading…")
        )
        opened = json.loads(middle.find_element(By.TAG_NAME, "pre").text)
        assert opened == chain[int(middle.get_attribute("data-index"))].event["data"]
        shoot(browser, tmp_path, "run")

        # the proof: verified now, from the page, against the store's own verdict
        browser.find_element(By.ID, "verify").click()
        wait(browser, lambda d: d.find_element(By.ID, "verdict").text not in ("", "verifying…"))
        verdict = browser.find_element(By.ID, "verdict")
        assert verdict.text == f"chain valid: {len(chain)} links"
        assert not browser.find_elements(By.CSS_SELECTOR, ".event.broken")
        shoot(browser, tmp_path, "proof")

        # the export download is the store's chain, line for line, and verifies standalone
        session = browser.get_cookie("runtrail_session")["value"]
        body = fetch(f"{run_url(demo.url, some)}/export.jsonl", None, session=session)
        lines = body.decode().splitlines()
        assert [json.loads(line)["hash"] for line in lines] == [link.hash for link in chain]
        exported = tmp_path / "export.jsonl"
        exported.write_bytes(body)
        tool = fetch(f"{demo.url}/verifier.py", None, session=session)
        (tmp_path / "verify.py").write_bytes(tool)
        check = subprocess.run(
            [sys.executable, str(tmp_path / "verify.py"), str(exported)],
            capture_output=True,
            text=True,
        )
        assert json.loads(check.stdout)["valid"] is True
    finally:
        audit.close()
        projections.close()


def fetch(
    url: str,
    token: str | None,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    session: str | None = None,
) -> bytes:
    status, body = request(url, token, method, headers, session)
    assert status == 200, (url, status, body[:300])
    return body


def request(
    url: str,
    token: str | None,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    session: str | None = None,
) -> tuple[int, bytes]:
    """One request with a bearer ``token`` (as a script sends it) or a signed-in browser's
    ``session`` cookie."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if session is not None:
        sent["Cookie"] = f"runtrail_session={session}"
    conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), headers=sent)
    response = conn.getresponse()
    try:
        return response.status, response.read()
    finally:
        conn.close()


def test_a_tampered_copy_shows_its_first_broken_link_in_place(
    demo: DemoStack, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    tenant = "globex"
    run_id = demo.runs_of(tenant)[0].run_id
    copy = tmp_path / "audit-copy.db"
    index = tampered_copy(demo.state_dir, copy, tenant, run_id)
    env = ui_env(demo.state_dir)
    env["RUNTRAIL_UI_TOKENS_FILE"] = str(demo.state.tokens_file)
    flags = (
        "--audit-store",
        f"sqlite:///{copy}",
        "--bootstrap-servers",
        demo.state.bootstrap_servers,
    )
    with explorer(demo.state_dir, env, *flags, log=tmp_path / "ui.log") as url:
        sign_in(browser, url, demo.tokens[tenant])
        browser.get(run_url(url, run_id))
        wait(browser, lambda d: d.find_elements(By.ID, "verify"))
        browser.find_element(By.ID, "verify").click()
        wait(browser, lambda d: "INVALID" in d.find_element(By.ID, "verdict").text)
        verdict = browser.find_element(By.ID, "verdict")
        # one numbering: the verdict's link N is the row marked #N (N = index + 1)
        number = index + 1
        assert verdict.text.startswith(f"INVALID at link {number} (hash mismatch)"), verdict.text
        broken = browser.find_elements(By.CSS_SELECTOR, ".event.broken")
        assert [li.get_attribute("data-index") for li in broken] == [str(index)]
        assert broken[0].find_element(By.CSS_SELECTOR, ".link-no").text == f"#{number}"
        assert f"first broken link (#{number})" in broken[0].text
        inclusion = browser.find_elements(By.ID, "inclusion")
        assert not inclusion or not inclusion[0].text.startswith("valid")
        shoot(browser, tmp_path, "tampered")
    # the original store is untouched: the stack's explorer still calls the chain valid
    token = demo.tokens[tenant]
    status, body = request(f"{run_url(demo.url, run_id)}/verify", token, "POST")
    assert status == 200 and json.loads(body)["valid"] is True


def test_another_tenants_token_gets_nothing(demo: DemoStack, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, demo.url, demo.tokens["globex"])
    listed = {r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")}
    _, projections = stores(demo.state_dir)
    try:
        assert listed == {r.run_id for r in projections.list(tenant="globex")}
    finally:
        projections.close()
    assert listed >= {r.run_id for r in demo.runs_of("globex")}
    theirs = [r.run_id for r in demo.runs_of("acme")]
    for run_id in theirs:
        assert run_id not in browser.page_source
        browser.get(f"{demo.url}/runs?q={quote(run_id)}")
        assert browser.find_elements(By.ID, "no-runs")
        browser.get(run_url(demo.url, run_id))
        assert browser.find_element(By.TAG_NAME, "h1").text == f"No run {run_id}"
    shoot(browser, tmp_path, "other-tenant")
    token = demo.tokens["globex"]
    run = run_url(demo.url, theirs[0])
    for path, method in (("/export.jsonl", "GET"), ("/verify", "POST"), ("/live", "GET")):
        status, _ = request(run + path, token, method)
        assert status == 404, path
    # and no token, or a wrong one, gets nothing at all
    for wrong in (None, "not-a-token"):
        status, _ = request(run + "/verify", wrong, "POST")
        assert status == 401
        status, _ = request(f"{demo.url}/runs", wrong)
        assert status == 303


def test_node_replay_mock_inline_and_live_behind_its_button(
    demo: DemoStack, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    from runtrail.capture.reader import iter_records

    tenant = "acme"
    run_id = demo.runs_of(tenant)[0].run_id
    records = [
        r
        for r in iter_records((demo.state_dir / "capture").as_uri(), run_id, "MODEL", tenant)
        if r.output_text
    ]
    record = records[0]
    # mock replay calls nothing; the stack's explorer replays live with the demo's fake model
    sign_in(browser, demo.url, demo.tokens[tenant])
    browser.get(run_url(demo.url, run_id))
    node = browser.find_element(By.CSS_SELECTOR, f'.node[data-record="{record.record_id}"]')
    node.find_element(By.CSS_SELECTOR, ".replay-mock").click()
    result = wait(browser, lambda d: node.find_elements(By.CSS_SELECTOR, ".mock-result"))
    assert json.loads(result[0].text)["outputText"] == record.output_text
    node.find_element(By.CSS_SELECTOR, ".replay-live").click()
    wait(browser, lambda d: node.find_elements(By.CSS_SELECTOR, "table.diff-output tr"))
    rows = node.find_elements(By.CSS_SELECTOR, "table.diff-output tr")[1:]
    right = "\n".join(r.find_elements(By.TAG_NAME, "td")[1].text for r in rows).strip()
    assert right == ReplayModel().create(record.inputs).message

    env = ui_env(demo.state_dir)
    env["RUNTRAIL_UI_TOKENS_FILE"] = str(demo.state.tokens_file)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path])
    flags = ("--model-client", "tests.ui_support:other_model")
    with explorer(demo.state_dir, env, *flags, log=tmp_path / "ui.log") as url:
        sign_in(browser, url, demo.tokens[tenant])
        browser.get(run_url(url, run_id))
        node = browser.find_element(By.CSS_SELECTOR, f'.node[data-record="{record.record_id}"]')
        node.find_element(By.CSS_SELECTOR, ".replay-live").click()
        wait(browser, lambda d: node.find_elements(By.CSS_SELECTOR, "table.diff-output tr"))
        rows = node.find_elements(By.CSS_SELECTOR, "table.diff-output tr")[1:]
        left = "\n".join(r.find_elements(By.TAG_NAME, "td")[0].text for r in rows).strip()
        right = "\n".join(r.find_elements(By.TAG_NAME, "td")[1].text for r in rows).strip()
        assert left == record.output_text.strip()
        messages = len(record.inputs["messages"])  # type: ignore[index]
        assert right == f"other-model-2 answers a prompt of {messages} messages\nthe end"
        shoot(browser, tmp_path, "replay")


def read_events(
    url: str,
    token: str,
    enough: Callable[[list[dict[str, Any]]], bool],
    last_id: str | None = None,
) -> list[dict[str, Any]]:
    """SSE messages of the live stream (id, event, data) until ``enough``, then disconnect."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
    response = conn.getresponse()
    assert response.status == 200
    found: list[dict[str, Any]] = []
    message: dict[str, Any] = {}
    try:
        while not enough(found):
            line = response.readline().decode().rstrip("\n")
            if not line:
                if "data" in message and message.get("event") == "runtrail-event":
                    found.append(message)
                message = {}
                continue
            name, _, value = line.partition(": ")
            if name in ("id", "event"):
                message[name] = value
            elif name == "data":
                message["data"] = json.loads(value)
    finally:
        conn.close()
    return found


def test_live_stream_resumes_after_the_last_event_id_and_loses_nothing(demo: DemoStack) -> None:
    from runtrail_tools.ui.live import Partitions

    tenant = "acme"
    run_id = demo.runs_of(tenant)[0].run_id
    audit, _ = stores(demo.state_dir)
    try:
        chain = audit.load_chain(tenant, run_id)
    finally:
        audit.close()
    settings = Settings(
        bootstrap_servers=demo.state.bootstrap_servers, events_topic=demo.state.events_topic
    )
    partition = Partitions(settings).of(run_id)
    assert partition is not None
    url = f"{run_url(demo.url, run_id)}/live?from={partition}:0"
    token = demo.tokens[tenant]
    wanted = [link.event["eventId"] for link in chain]
    first = read_events(url, token, lambda found: len(found) >= 3)
    last = wanted[-1]
    rest = read_events(
        url, token, lambda found: any(m["data"]["eventId"] == last for m in found), first[-1]["id"]
    )
    events = [m["data"] for m in first + rest]
    # every event of the run, in sequence order, across the reconnect (a redelivered
    # duplicate in the topic may appear twice; it is never one missing)
    assert list(dict.fromkeys(e["eventId"] for e in events)) == wanted
    offsets = [int(m["id"].split(":")[1]) for m in first + rest]
    assert offsets == sorted(set(offsets))
    assert all(e["tenantId"] == tenant and e["runId"] == run_id for e in events)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_a_run_in_progress_updates_on_its_page(
    demo: DemoStack, browser: Any, tmp_path: Path
) -> None:
    """New events land in their step (a new step's section after the last one, the run's
    closing event in a section of its own, as the timeline groups them), the services'
    rendering of that step with its node card follows, and the header's status and counts
    follow the projection (``succeeded`` after ``run.succeeded``)."""
    from selenium.webdriver.common.by import By

    from runtrail.publisher import Publisher

    tenant = "acme"
    run_id = f"live-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        bootstrap_servers=demo.state.bootstrap_servers,
        events_topic=demo.state.events_topic,
        spool_dir=tmp_path / "spool",
        tenant=tenant,
    )
    prompt = {"prompt": {"messages": [{"role": "user", "content": "hi"}]}}
    audit, projections = stores(demo.state_dir)
    try:
        with Publisher(settings) as publisher:
            assert publisher.publish("MODEL_REQUEST", run_id, prompt, turn_id="t", step=1)
            answer = {"message": "one", "raw": None}
            assert publisher.publish("MODEL_RESPONSE", run_id, answer, turn_id="t", step=1)
            assert publisher.flush(30) == 0
            wait_until(
                lambda: (
                    projections.get(tenant, run_id) is not None
                    and (head := audit.head(tenant, run_id)) is not None
                    and head.length == 2
                ),
                "the services to record the first two events",
            )
            sign_in(browser, demo.url, demo.tokens[tenant])
            browser.get(run_url(demo.url, run_id))
            wait(browser, lambda d: "following" in d.find_element(By.ID, "live-state").text)
            rendered = wait(
                browser,
                lambda d: [
                    li.get_attribute("data-seq")
                    for li in d.find_elements(By.CSS_SELECTOR, "#timeline li.event[data-index]")
                ],
            )
            assert rendered == ["1", "2"]
            assert "executing" in wait(
                browser, lambda d: d.find_element(By.CSS_SELECTOR, ".summary").text
            )
            assert publisher.publish("MODEL_REQUEST", run_id, prompt, turn_id="t", step=2)
            answer = {"message": "two", "raw": None}
            assert publisher.publish("MODEL_RESPONSE", run_id, answer, turn_id="t", step=2)
            end = {"reason": "end_turn"}
            assert publisher.publish("STEP_END", run_id, end, turn_id="t", step=2)
            assert publisher.publish("run.succeeded", run_id, {"resultRef": "result:1"})
            assert publisher.flush(30) == 0

            def step_of(seq: str) -> list[str]:
                return browser.execute_script(  # type: ignore[no-any-return]
                    "var s = document.querySelector('#timeline li.event[data-seq=\"' + arguments[0]"
                    " + '\"]').closest('section.step'); return [s.dataset.step, s.dataset.turn];",
                    seq,
                )

            wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'li.event[data-seq="6"]'))
            assert [step_of(seq) for seq in "123456"] == [["1", "t"]] * 2 + [["2", "t"]] * 3 + [
                ["", ""]
            ]
            # the header follows the events it counts (a live page: read until it says so)
            wait(browser, lambda d: d.find_element(By.ID, "event-count").text == "6")
            # the services' rendering replaces the page's: link numbers, the MODEL node card
            wait(
                browser,
                lambda d: (
                    d.find_elements(By.CSS_SELECTOR, 'section.step[data-step="2"] .node.n-model')
                    and len(d.find_elements(By.CSS_SELECTOR, "li.event[data-index]")) == 6
                ),
            )

            def succeeded(d: Any) -> str | None:
                text: str = d.find_element(By.CSS_SELECTOR, ".summary").text
                return text if "succeeded" in text else None

            assert "version 6" in wait(browser, succeeded)
            steps = wait(
                browser,
                lambda d: [
                    s.get_attribute("data-step")
                    for s in d.find_elements(By.CSS_SELECTOR, "#timeline section.step")
                ],
            )
            assert steps == ["1", "2", ""]
            shoot(browser, tmp_path, "live")
    finally:
        audit.close()
        projections.close()


def test_the_runs_list_row_follows_its_run(demo: DemoStack, browser: Any, tmp_path: Path) -> None:
    """A shown run's row in the list is read again as its events arrive: its version and
    status follow the projection without a reload."""
    from selenium.webdriver.common.by import By

    from runtrail.publisher import Publisher

    tenant = "acme"
    run_id = f"listed-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        bootstrap_servers=demo.state.bootstrap_servers,
        events_topic=demo.state.events_topic,
        spool_dir=tmp_path / "spool",
        tenant=tenant,
    )
    _, projections = stores(demo.state_dir)
    try:
        with Publisher(settings) as publisher:
            assert publisher.publish("MODEL_REASONING", run_id, {"text": "one"})
            assert publisher.flush(30) == 0
            wait_until(lambda: projections.get(tenant, run_id) is not None, "the projection")
            sign_in(browser, demo.url, demo.tokens[tenant])
            row = f'tr.run[data-run="{run_id}"]'
            wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row))  # newest first
            assert browser.find_element(By.CSS_SELECTOR, row).get_attribute("data-version") == "1"
            browser.execute_script("document.getElementById('runs').dataset.marker = 'kept'")
            assert publisher.publish("MODEL_REASONING", run_id, {"text": "two"})
            assert publisher.publish("run.succeeded", run_id, {"resultRef": "result:1"})
            assert publisher.flush(30) == 0
            wait(
                browser,
                lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute("data-version") == "3",
            )
            status = browser.find_element(By.CSS_SELECTOR, f"{row} .status").text
            assert status == "succeeded"
            # the same page, not a reload
            assert browser.find_element(By.ID, "runs").get_attribute("data-marker") == "kept"
            shoot(browser, tmp_path, "list-live")
    finally:
        projections.close()


def test_runs_page_by_keyset_and_a_wrong_token_is_refused(
    demo: DemoStack, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    env = ui_env(demo.state_dir)
    env["RUNTRAIL_UI_TOKENS_FILE"] = str(demo.state.tokens_file)
    env["RUNTRAIL_UI_PAGE_SIZE"] = "1"
    with explorer(demo.state_dir, env, log=tmp_path / "ui.log") as url:
        browser.get(url + "/login")
        browser.find_element(By.ID, "token").send_keys("not-a-token")
        browser.find_element(By.ID, "login").click()
        assert "not valid" in wait(browser, lambda d: d.find_element(By.ID, "login-error")).text
        assert browser.get_cookie("runtrail_session") is None

        sign_in(browser, url, demo.tokens["acme"])
        seen: list[str] = []
        while True:
            rows = browser.find_elements(By.CSS_SELECTOR, "tr.run")
            assert len(rows) == 1
            seen.append(rows[0].get_attribute("data-run"))
            following = browser.find_elements(By.ID, "next-page")
            if not following:
                break
            following[0].click()
        # every run of the tenant the store holds (the demo's, and any a test added), once,
        # newest first; and back again, page by page, to the first
        _, projections = stores(demo.state_dir)
        try:
            everyone = projections.search(RunQuery("acme", limit=10_000))
            assert seen == [r.run_id for r in everyone.rows]
        finally:
            projections.close()
        assert set(seen) >= {r.run_id for r in demo.runs_of("acme")}
        assert browser.find_element(By.ID, "total").text == str(len(seen))
        back = [browser.find_element(By.CSS_SELECTOR, "tr.run").get_attribute("data-run")]
        while previous := browser.find_elements(By.ID, "prev-page"):
            previous[0].click()
            back.insert(
                0, browser.find_element(By.CSS_SELECTOR, "tr.run").get_attribute("data-run")
            )
        assert back == seen

        browser.find_element(By.CSS_SELECTOR, "header button[type=submit]").click()  # log out
        wait(browser, lambda d: d.find_elements(By.ID, "token"))
        browser.get(url + "/runs")
        assert browser.find_elements(By.ID, "token")  # signed out: back to the form


def test_a_halted_run_is_marked_and_filtered(demo: DemoStack, browser: Any, tmp_path: Path) -> None:
    """An approval granted for a run that never asked for one: the projector halts the run
    (invalid transition); the list marks it, the ``halted`` filter finds it, its page says why."""
    from selenium.webdriver.common.by import By

    from runtrail.publisher import Publisher

    tenant = "globex"
    run_id = f"halt-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        bootstrap_servers=demo.state.bootstrap_servers,
        events_topic=demo.state.events_topic,
        spool_dir=tmp_path / "spool",
        tenant=tenant,
    )
    with Publisher(settings) as publisher:
        accepted = {"goalRef": "goal-1", "policyVersion": "p1"}
        assert publisher.publish("run.accepted", run_id, accepted)
        granted = {"actionDigest": "sha256:00", "approvedBy": "someone"}
        assert publisher.publish("run.approval_granted", run_id, granted)
        assert publisher.flush(30) == 0
    _, projections = stores(demo.state_dir)
    try:
        wait_until(
            lambda: (row := projections.get(tenant, run_id)) is not None and row.halted,
            "the projector to halt the run",
        )
        halted = projections.get(tenant, run_id)
        reason = halted.halt_reason
        assert reason is not None and halted.halt_coordinates is not None
        halted_at = halted.halt_coordinates.event_id
    finally:
        projections.close()
    sign_in(browser, demo.url, demo.tokens[tenant])
    browser.get(f"{demo.url}/runs?status=halted")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.run")
    assert [r.get_attribute("data-run") for r in rows] == [run_id]
    assert rows[0].find_element(By.CSS_SELECTOR, ".mark.halted").text == "halted"
    rows[0].find_element(By.LINK_TEXT, run_id).click()
    wait(browser, lambda d: d.find_elements(By.ID, "run-id"))
    assert reason in browser.find_element(By.CSS_SELECTOR, ".summary").text
    # marked in the timeline, on the event it halted at (the approval nobody asked for)
    marked = browser.find_elements(By.CSS_SELECTOR, "li.event .halt-here")
    assert [m.text for m in marked] == [f"the projection halted here: {reason}"]
    row = marked[0].find_element(By.XPATH, "./ancestor::li[1]")
    assert row.get_attribute("data-type") == "run.approval_granted"
    audit, _ = stores(demo.state_dir)
    try:
        link = audit.link_at(tenant, run_id, int(row.get_attribute("data-index")))
        assert link is not None and link.event["eventId"] == halted_at
    finally:
        audit.close()
    shoot(browser, tmp_path, "halted")


def test_publisher_events_have_times_and_the_approver_is_in_the_row(
    demo: DemoStack, browser: Any, tmp_path: Path
) -> None:
    """A publisher-driven run (research: its events carry no ``recordedAt``) shows a time on
    every event and a waterfall with its streamed answers' first tokens; the command-driven
    deploy run names its approver in the approval's row."""
    from selenium.webdriver.common.by import By

    tenant = "acme"
    sign_in(browser, demo.url, demo.tokens[tenant])
    audit, _ = stores(demo.state_dir)
    try:
        research = next(r.run_id for r in demo.runs_of(tenant) if r.key == "research")
        chain = audit.load_chain(tenant, research)
        assert any(link.event.get("recordedAt") is None for link in chain)  # the publisher's
        browser.get(run_url(demo.url, research))
        wait(browser, lambda d: d.find_elements(By.ID, "waterfall"))
        times = browser.find_elements(By.CSS_SELECTOR, "#timeline li.event[data-index] time")
        assert [t.get_attribute("datetime") for t in times] == [
            link.event["occurredAt"] for link in chain
        ]
        assert all(t.text for t in times)
        steps = {link.event.get("step") for link in chain} - {None}
        shown = browser.find_elements(By.CSS_SELECTOR, "#waterfall tr.wf-step")
        assert {int(s.get_attribute("data-step")) for s in shown} == steps
        assert browser.find_elements(By.CSS_SELECTOR, "#waterfall span.ttft")  # streamed
        shoot(browser, tmp_path, "research-waterfall")

        deploy = next(r.run_id for r in demo.runs_of(tenant) if r.key == "deploy")
        granted = [
            link for link in audit.load_chain(tenant, deploy)
            if link.event["type"] == "run.approval_granted"
        ]  # fmt: skip
        assert len(granted) == 1
        actor = granted[0].event["actor"]
        browser.get(run_url(demo.url, deploy))
        row = browser.find_element(
            By.CSS_SELECTOR, f'li.event[data-index="{granted[0].index}"] .actor'
        )
        assert row.text == f"approved by {actor['kind']}:{actor['id']}"
        assert actor["id"] == granted[0].event["data"]["approvedBy"]
        # the second operator's stale approval appended nothing; the page lists its refusal
        refused = browser.find_elements(By.CSS_SELECTOR, "#refusals tr.refusal")
        assert [r.get_attribute("data-code") for r in refused] == ["stale"]
        assert "by backup@acme" in refused[0].text
        assert f"run at v{granted[0].event['sequence']}" in refused[0].text
        shoot(browser, tmp_path, "deploy-approver")
    finally:
        audit.close()


def test_the_ledger_runs_crash_and_resume_are_marked_and_filtered(
    demo: DemoStack, browser: Any, tmp_path: Path
) -> None:
    """The ledger run's process is SIGKILLed after step 3 and a new process resumes it: the
    runs list's ``resumed`` filter finds it, and its timeline marks, at the resume's step, the
    crash gap and "resumed by a new process at step 4; steps 1-3 (en dash) from the resume
    cache", as
    the sealed run.resumed says."""
    from selenium.webdriver.common.by import By

    from runtrail_tools.demo.script import script

    tenant = "globex"
    crashed_after = script("ledger").crash_after_step
    assert crashed_after == 3
    ledger = next(r.run_id for r in demo.runs_of(tenant) if r.key == "ledger")
    sign_in(browser, demo.url, demo.tokens[tenant])
    browser.get(f"{demo.url}/runs?resumed=1")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.run")
    assert [r.get_attribute("data-run") for r in rows] == [ledger]  # only the resumed run
    assert rows[0].find_element(By.CSS_SELECTOR, ".m-resumed").text == "resumed"
    assert browser.find_element(By.ID, "resumed").is_selected()

    rows[0].find_element(By.LINK_TEXT, ledger).click()
    wait(browser, lambda d: d.find_elements(By.ID, "timeline"))
    (note,) = browser.find_elements(By.CSS_SELECTOR, "#timeline .resume-note")
    section = note.find_element(By.XPATH, "./ancestor::section[1]")
    assert section.get_attribute("data-step") == str(crashed_after + 1)
    assert (note.get_attribute("data-at-step"), note.get_attribute("data-cached-steps")) == (
        "4",
        "3",
    )
    said = note.find_element(By.CSS_SELECTOR, "p.resumed").text
    assert "resumed by a new process at step 4; steps 1\N{EN DASH}3 from the resume cache" in said
    assert "6 cache hits" in said  # three model answers and three tool results
    gap = note.find_element(By.CSS_SELECTOR, ".crash-gap")
    assert gap.text.startswith("crash gap ")

    audit, projections = stores(demo.state_dir)
    try:
        chain = audit.load_chain(tenant, ledger)
        (resumed,) = [link for link in chain if link.event["type"] == "run.resumed"]
        assert note.get_attribute("data-index") == str(resumed.index)
        data = resumed.event["data"]
        assert (data["atStep"], data["cachedSteps"], data["cacheHits"]) == (4, 3, 6)
        # the earlier life's last event is the one just before the resume in the chain
        last_old = chain[resumed.index - 1].event
        assert data["afterSequence"] == int(last_old["sequence"])
        assert f"after event seq {last_old['sequence']}" in gap.text
        assert int(gap.get_attribute("data-gap-ms")) >= 0
        # the resuming process is not the one that crashed (nor this test)
        assert data["pid"] not in (None, os.getpid()) and f"pid {data['pid']}" in said
        stored = projections.get(tenant, ledger)
        assert stored is not None and stored.state is not None
        assert stored.state.resumes == 1 and stored.state.last_resume is not None
        assert stored.state.last_resume.sequence == int(resumed.event["sequence"])
    finally:
        audit.close()
        projections.close()
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", note)
    shoot(browser, tmp_path, "resumed")
