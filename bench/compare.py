"""runtrail against Quix Streams and the bare Kafka client, on one freshly produced topic.

    python -m bench.compare --events 300000            (or: make bench)

One run fills a fresh topic through ``Publisher.publish`` in a tight loop (timed: the
publisher's rate), then reads it with every contender, interleaved over ``--rounds`` rounds
(medians reported), each contender in a fresh process of its own (see :mod:`bench.contender`;
``--in-process`` runs them all in this one): bare ``confluent_kafka`` consume and discard (the
baseline), bare consume plus fastavro decode, runtrail ``noop`` through the runtime, a Quix
Streams app doing the same decode, runtrail ``capture`` to JSONL (fsync before every commit)
and a Quix app pairing the same nodes and writing the same JSONL lines (checked: the two
outputs hold the same lines).
Beside them, once: the ``audit``, ``projector``, ``resume-cache`` and ``sessions`` services
(each in a process of its own too, at its own defaults), ``replay projection --into sqlite``,
and ``runtrail publish`` of a JSONL file. ``--profile``
then runs ``noop`` and ``capture`` once more under pyinstrument and saves the profiles and
their top entries under bench/results/. Needs the bench extra: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from bench.contender import SERVICES, measure, topic_settings
from bench.contender import run as run_contender
from bench.harness import (
    RESULTS,
    Rate,
    broker,
    create_topic,
    delete_topic,
    run_service,
)
from bench.profiles import top_entries
from bench.table import Row, write_table
from bench.workload import workload
from runtrail.config import Settings
from runtrail.persistence.urls import sqlite_url
from runtrail.publisher import Publisher
from runtrail_services.capture.service import CaptureService
from runtrail_services.noop.service import NoopService


def publish_tight(settings: Settings, events: list[dict[str, Any]]) -> Rate:
    """``Publisher.publish`` in a tight loop (validation, redaction, encode, produce), until
    every event is acknowledged."""
    publisher = Publisher(settings, registry=CollectorRegistry())
    publish = publisher.publish
    started = time.perf_counter()
    for e in events:
        publish(
            e["type"],
            e["runId"],
            e["data"],
            session_id=e["sessionId"],
            turn_id=e["turnId"],
            step=e["step"],
            actor=e["actor"],
            correlation_id=e["correlationId"],
            tenant_id=e["tenantId"],
        )
    left = publisher.flush(300)
    elapsed = time.perf_counter() - started
    stats = publisher.stats()
    publisher.close()
    if left or stats.rejected or stats.spooled:
        raise SystemExit(f"publisher did not deliver everything: {left} left, {stats}")
    return Rate("Publisher.publish, tight loop (until acknowledged)", len(events), elapsed)


def publish_cli(settings: Settings, events: list[dict[str, Any]], work: Path) -> Rate:
    """``runtrail publish FILE`` in its own process, into a fresh topic (start-up included)."""
    import orjson

    path = work / "publish.jsonl"
    with path.open("wb") as out:
        for e in events:
            out.write(orjson.dumps(e) + b"\n")
    topic = create_topic(settings.bootstrap_servers, 6, prefix="bench-cli")
    env = {
        **os.environ,
        "RUNTRAIL_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "RUNTRAIL_SPOOL_DIR": str(work / "cli-spool"),
    }
    try:
        started = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "runtrail"), "publish", str(path), "--topic", topic],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        elapsed = time.perf_counter() - started
    finally:
        delete_topic(settings.bootstrap_servers, topic)
    return Rate(
        "runtrail publish FILE.jsonl (own process, start-up included)", len(events), elapsed
    )


def jsonl_lines(directory: Path) -> Counter[bytes]:
    lines: Counter[bytes] = Counter()
    for path in directory.rglob("capture-*.jsonl"):
        lines.update(path.read_bytes().splitlines())
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (medians)")
    parser.add_argument("--cli-events", type=int, default=100_000, help="for runtrail publish")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--profile", action="store_true", help="profile noop and capture")
    parser.add_argument("--skip-services", action="store_true", help="only the peer table")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the round's contenders in this process, not each in its own",
    )
    args = parser.parse_args()

    print(f"generating {args.events:,} events …", flush=True)
    events = list(workload(args.events))
    work = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    samples: dict[str, list[Rate]] = {}
    others: list[Rate] = []
    extra: dict[str, Any] = {"events": args.events, "partitions": args.partitions}

    def keep(rate: Rate) -> Rate:
        blocked = "" if rate.blocked is None else f" (blocked {rate.blocked:.2f} s)"
        print(f"  {rate.name}: {rate.per_second:,.0f} events/s{blocked}", flush=True)
        samples.setdefault(rate.name, []).append(rate)
        return rate

    with broker(args.bootstrap_servers) as bootstrap:
        topic = create_topic(bootstrap, args.partitions)
        settings = topic_settings(bootstrap, topic, work)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics(
            [NewTopic(f"{topic}.audit", args.partitions, 1)]
        ).values():
            future.result(60)
        try:
            print("Publisher.publish …", flush=True)
            others.append(publish_tight(settings, events))
            print(f"  {others[-1].per_second:,.0f} events/s", flush=True)
            contend = run_contender if args.in_process else measure
            for round_no in range(args.rounds):
                print(f"round {round_no + 1} of {args.rounds} …", flush=True)
                for name in ("raw", "raw-decode", "noop", "quix-decode"):
                    keep(contend(name, bootstrap, topic, args.events, work / name))
                ours, theirs = work / f"capture-{round_no}", work / f"quix-{round_no}"
                keep(contend("capture", bootstrap, topic, args.events, ours))
                keep(contend("quix-capture", bootstrap, topic, args.events, theirs))
                a, b = jsonl_lines(ours), jsonl_lines(theirs)
                extra["capture_lines"] = sum(a.values())
                extra["capture_output_identical"] = a == b
                print(f"  capture lines {sum(a.values())}, identical: {a == b}", flush=True)
                # the outputs stay until the end: on ext4 without a journal (this project's
                # machine) files made within a minute of many deletions are made slowly, and
                # the services after the rounds make thousands (docs/PERFORMANCE.md)
            if not args.skip_services:
                for name in SERVICES:  # each in a process of its own, as the rounds' contenders
                    print(f"{name} …", flush=True)
                    others.append(contend(name, bootstrap, topic, args.events, work / name))
                    print(f"  {others[-1].per_second:,.0f} events/s", flush=True)
                print("replay projection --into sqlite …", flush=True)
                others.append(replay_projection(settings, work))
                print(f"  {others[-1].per_second:,.0f} events/s", flush=True)
                print("runtrail publish …", flush=True)
                others.append(publish_cli(settings, events[: args.cli_events], work))
                print(f"  {others[-1].per_second:,.0f} events/s", flush=True)
            if args.profile:
                extra["profiles"] = profile(settings, args.events, work)
        finally:
            delete_topic(bootstrap, topic, f"{topic}.audit", f"{topic}.cache", f"{topic}.sessions")
    shutil.rmtree(work, ignore_errors=True)
    medians = {name: _median(rates) for name, rates in samples.items()}
    rows = peer_rows(medians) + [Row(r.name, r.per_second) for r in others]
    write_table(rows, medians["raw consume (librdkafka poll + discard)"].per_second, extra)


def _group(name: str) -> str:
    """A consumer group of its own: every run reads the topic from the start."""
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


def _median(rates: list[Rate]) -> Rate:
    ordered = sorted(rates, key=lambda r: r.per_second)
    middle = ordered[len(ordered) // 2]
    return Rate(middle.name, middle.events, statistics.median(r.seconds for r in rates))


def peer_rows(medians: dict[str, Rate]) -> list[Row]:
    quix_decode_rate = medians["Quix Streams app, same decode"].per_second
    quix_capture_rate = medians["Quix app pairing the same nodes, orjson JSONL"].per_second
    peers = {
        "runtrail noop": ("Quix", quix_decode_rate),
        "runtrail capture to JSONL": ("Quix", quix_capture_rate),
    }
    rows = []
    for name, rate in medians.items():
        peer = peers.get(name)
        rows.append(
            Row(name, rate.per_second, peer[0] if peer else None, peer[1] if peer else None)
        )
    return rows


def replay_projection(settings: Settings, work: Path) -> Rate:
    from bench.projector import run_rebuild

    rate, _runs = run_rebuild(settings, sqlite_url(work / "replayed.db"), 100)
    return Rate("replay projection --into sqlite", rate.events, rate.seconds)


def profile(settings: Settings, expected: int, work: Path) -> dict[str, list[str]]:
    """noop and capture once more under pyinstrument; their profiles' top entries."""
    tops = {}
    for factory, name, options in (
        (NoopService, "noop", None),
        (
            CaptureService,
            "capture",
            {"sink_url": (work / "profiled").as_uri(), "idle_flush_s": "3600"},
        ),
    ):
        print(f"profiling {name} …", flush=True)
        run_service(
            factory, name, settings, expected, options=options, profile=True, group=_group(name)
        )
        tops[name] = top_entries(RESULTS / f"{name}-profile.json")
    return tops


if __name__ == "__main__":
    main()
