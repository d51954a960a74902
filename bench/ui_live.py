"""Benchmark of the run explorer's live view at scale: many open run pages, each following its
run over server-sent events, and how long a new event takes to reach each of them.

    python -m bench.ui_live [--pages 200] [--rounds 5] [--partitions 3]

Seeds ``--pages`` runs into the stores (sealed with the audit library, projected by the pure
projector), serves them with ``runtrail ui`` (a child process, as a user runs it, on a broker
with the events topic), opens one live stream per run as the run page does (``/live`` from
the audit store's position, ``Last-Event-ID``-keyed SSE, read by plain HTTP streaming
clients), then ``--rounds`` times produces one new event for every run at once (keyed by run
ID into its murmur2 partition, as the publisher places it) and times, per page, from the
produce call to the event's SSE message. The issue's bar: every page within a second.
"""

from __future__ import annotations

import argparse
import asyncio
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

from confluent_kafka import Producer

from bench.harness import broker, create_topic, delete_topic
from bench.workload import _event, run_events
from runtrail.audit.link import genesis_head, seal
from runtrail.events.codec import EventCodec, validate_json_form
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection.replaying import replay
from runtrail.projection.store import ProjectionBatch
from runtrail.resume.partitioning import partition_for

TENANT = "bench"
TOKEN = "bench-token"


def seed(state: Path, runs: list[list[dict[str, Any]]]) -> None:
    audit = open_store(AUDIT_LINKS, sqlite_url(state / "audit.db"))
    projections = open_store(PROJECTIONS, sqlite_url(state / "projection.db"))
    try:
        for forms in runs:
            run_id = str(forms[0]["runId"])
            head = genesis_head(TENANT, run_id)
            links = []
            for form in forms:
                link = seal(head.length, head.hash, form)
                links.append(link)
                head = type(head)(TENANT, run_id, head.length + 1, link.hash)
            audit.append_batch(links, {})
            events = [validate_json_form(form) for form in forms]
            projections.apply_batch(ProjectionBatch(projections=[replay(events)]))
    finally:
        audit.close()
        projections.close()


class Page:
    """One open run page's live stream: the eventIds it received, and when."""

    def __init__(self, run_id: str, partition: int) -> None:
        self.run_id = run_id
        self.partition = partition
        self.received: dict[str, float] = {}
        self.opened = asyncio.Event()

    async def follow(self, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            (
                f"GET /runs/{self.run_id}/live?from={self.partition}:0 HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Accept: text/event-stream\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        try:
            while line := await reader.readline():
                if line.startswith(b"retry:"):  # the stream is subscribed
                    self.opened.set()
                elif line.startswith(b"data: "):
                    self.received[json.loads(line[6:])["eventId"]] = time.perf_counter()
        finally:
            writer.close()


async def measure(port: int, bootstrap: str, topic: str, args: argparse.Namespace) -> list[float]:
    rng = random.Random(11)
    pages = [Page(f"live-{n:04d}", partition_for(f"live-{n:04d}", args.partitions)) for n in
             range(args.pages)]  # fmt: skip
    tasks = [asyncio.create_task(page.follow(port)) for page in pages]
    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(p.opened.wait() for p in pages)), 120)
    print(f"{len(pages)} pages following in {time.perf_counter() - started:.1f} s")
    codec = EventCodec()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    latencies: list[float] = []
    for round_no in range(args.rounds):
        sent: dict[str, tuple[Page, float]] = {}
        for page in pages:
            form = _event(page.run_id, 100 + round_no, "MODEL_REASONING", {"text": "x"},
                          tenant=TENANT, step=None, rng=rng)  # fmt: skip
            value = codec.encode_json_form(form)
            sent[form["eventId"]] = (page, time.perf_counter())
            producer.produce(topic, value, key=page.run_id.encode(), partition=page.partition)
            producer.poll(0)
        producer.flush(30)
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline and any(
            event_id not in page.received for event_id, (page, _) in sent.items()
        ):
            await asyncio.sleep(0.05)
        this = [
            page.received[event_id] - at if event_id in page.received else float("inf")
            for event_id, (page, at) in sent.items()
        ]
        latencies += this
        late = sum(1 for x in this if x > 1.0)
        print(
            f"  round {round_no + 1}: median {statistics.median(this) * 1000:6.0f} ms, "
            f"slowest {max(this) * 1000:6.0f} ms, {late} of {len(this)} pages over 1 s"
        )
        await asyncio.sleep(1.0)
    for task in tasks:
        task.cancel()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--bootstrap", help="an existing cluster (default: a local broker)")
    args = parser.parse_args()
    with broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        topic = create_topic(bootstrap, args.partitions, prefix="bench-live")
        state = Path(tmp) / "state"
        state.mkdir()
        rng = random.Random(7)
        runs = [list(run_events(f"live-{n:04d}", rng, tenant=TENANT, steps=1))
                for n in range(args.pages)]  # fmt: skip
        seed(state, runs)
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
            latencies = asyncio.run(measure(int(found.group(1)), bootstrap, topic, args))
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            delete_topic(bootstrap, topic)
    latencies.sort()
    over = sum(1 for x in latencies if x > 1.0)
    print(f"{args.pages} open run pages, {args.rounds} rounds of one new event each:")
    print(f"  median              {statistics.median(latencies) * 1000:8.0f} ms")
    print(f"  p99                 {latencies[int(len(latencies) * 0.99) - 1] * 1000:8.0f} ms")
    print(f"  slowest             {latencies[-1] * 1000:8.0f} ms")
    print(f"  over 1 s            {over:8d} of {len(latencies)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
