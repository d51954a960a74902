"""Benchmark of the run explorer: the page of one run with 10,000 events, loaded over HTTP.

    python -m bench.ui_run_page [--events 10000] [--loads 10] [--browser-loads 5]

Builds the stores a real stack would hold for one long run with the services' own libraries
(the workload's events sealed into a SQLite audit store, projected by the pure projector,
paired into node records by the capture pairer and written by the file sink), serves them
with ``runtrail ui`` (a child process, as a user runs it, on a broker with the events topic,
so the page also places its live stream), then times ``GET /runs/{id}`` end to end (signed
in; the first load warms the caches and is reported apart), and the page's load event in
headless Chromium (Navigation Timing's ``loadEventEnd``: HTML, script, stylesheet and layout,
signed in through the login form). The issue's bar: the load event under a second.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import broker, create_topic, delete_topic
from bench.workload import run_events
from runtrail.audit.link import genesis_head, seal
from runtrail.audit.store import TopicPartition
from runtrail.capture.file_sink import JsonlFileSink
from runtrail.capture.pairer import NodePairer
from runtrail.events.codec import validate_json_form
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection.replaying import replay
from runtrail.projection.store import ProjectionBatch

TENANT = "bench"
TOKEN = "bench-token"


def one_run(events: int) -> list[dict[str, Any]]:
    """The workload's run with enough steps for ``events`` events (cut at a step's end)."""
    rng = random.Random(7)
    steps = 1
    while True:
        forms = list(run_events("run-10k", rng, tenant=TENANT, steps=steps))
        if len(forms) >= events:
            return forms
        steps = max(steps + 1, int(steps * events / max(len(forms), 1)))
        rng = random.Random(7)


def build_stores(state: Path, forms: list[dict[str, Any]]) -> str:
    run_id = str(forms[0]["runId"])
    audit = open_store(AUDIT_LINKS, sqlite_url(state / "audit.db"))
    head = genesis_head(TENANT, run_id)
    links = []
    for form in forms:
        link = seal(head.length, head.hash, form)
        links.append(link)
        head = type(head)(TENANT, run_id, head.length + 1, link.hash)
    audit.append_batch(links, {TopicPartition("runtrail.events", 0): len(forms)})
    audit.close()
    events = [validate_json_form(form) for form in forms]
    projections = open_store(PROJECTIONS, f"sqlite:///{state / 'projection.db'}")
    projections.apply_batch(ProjectionBatch(projections=[replay(events)]))
    projections.close()
    pairer = NodePairer(window=len(events) + 1)
    records = [r for offset, e in enumerate(events) for r in pairer.feed(e, 0, offset)]
    sink = JsonlFileSink.from_url((state / "capture").as_uri())
    sink.write(records)
    sink.flush()
    sink.close()
    return run_id


def get(port: int, path: str, cookie: str) -> tuple[int, int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    conn.request("GET", path, headers={"Authorization": f"Bearer {cookie}"})
    response = conn.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - started
    conn.close()
    return response.status, len(body), elapsed


def browser_loads(port: int, path: str, loads: int) -> list[float]:
    """Seconds from navigation start to the end of the load event, ``loads`` times (after
    one warm-up load), in headless Chromium as the browser tests drive it."""
    from selenium.webdriver.common.by import By

    from tests.ui_support import chrome

    driver = chrome()
    try:
        base = f"http://127.0.0.1:{port}"
        driver.get(base + "/login")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login").click()
        driver.get(base + path)
        times = []
        for _ in range(loads):
            driver.get(base + path)
            entry = driver.execute_script(
                "var n = performance.getEntriesByType('navigation')[0];"
                "return [n.loadEventEnd, document.querySelectorAll('*').length];"
            )
            times.append(float(entry[0]) / 1000)
        print(f"  elements in the page {int(entry[1]):8d}")
        return times
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--browser-loads", type=int, default=5, help="0: no browser")
    parser.add_argument("--bootstrap", help="an existing cluster (default: a local broker)")
    args = parser.parse_args()
    with broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        topic = create_topic(bootstrap, 3, prefix="bench-ui")
        state = Path(tmp) / "state"
        state.mkdir()
        forms = one_run(args.events)
        started = time.perf_counter()
        run_id = build_stores(state, forms)
        print(f"stores: {len(forms)} events of {run_id} in {time.perf_counter() - started:.1f} s")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
        env["RUNTRAIL_UI_TOKENS"] = json.dumps({TENANT: TOKEN})
        env["RUNTRAIL_BOOTSTRAP_SERVERS"] = bootstrap
        env["RUNTRAIL_EVENTS_TOPIC"] = topic
        log = Path(tmp) / "ui.log"
        argv = [sys.executable, "-m", "runtrail_tools.cli.main", "ui", "--state-dir", str(state)]
        with log.open("w") as out:
            proc = subprocess.Popen([*argv, "--port", "0"], stdout=out, stderr=out, env=env)
        try:
            while not (found := re.search(r":(\d+)/ ", log.read_text())):
                if proc.poll() is not None:
                    print(log.read_text())
                    return 1
                time.sleep(0.1)
            port = int(found.group(1))
            path = f"/runs/{run_id}"
            status, size, first = get(port, path, TOKEN)
            assert status == 200, status
            times = [get(port, path, TOKEN)[2] for _ in range(args.loads)]
            loaded = browser_loads(port, path, args.browser_loads) if args.browser_loads else []
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            delete_topic(bootstrap, topic)
    print(f"page of a run with {len(forms)} events: {size / 1e6:.1f} MB of HTML")
    print(f"  first load (cold)   {first * 1000:8.0f} ms")
    print(f"  median of {args.loads:<3}       {statistics.median(times) * 1000:8.0f} ms")
    print(f"  slowest             {max(times) * 1000:8.0f} ms")
    if loaded:
        print(f"load event in headless Chromium, median of {len(loaded)}:")
        print(f"  loadEventEnd        {statistics.median(loaded) * 1000:8.0f} ms")
        print(f"  slowest             {max(loaded) * 1000:8.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
