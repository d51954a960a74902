"""Benchmark of the projector: the service, and ``replay projection --into`` a fresh SQLite store.

    python -m bench.projector --events 300000

Fills a fresh topic with the realistic workload of :mod:`bench.workload` (runs of model, tool
and domain events: run.accepted, model.operation_completed, run.succeeded) through the
publisher, then reads it back four ways in the same run, each from the start of the topic:

* a bare librdkafka consumer that polls and discards (the raw rate: the baseline);
* the ``noop`` service through the runtime (decode, upcast, validate, sequence checks, commit);
* the ``projector`` service into a fresh SQLite store (all that, plus the projection, halts,
  snapshots, and rows + offsets written in one transaction per flush, every commit interval),
  timed like ``noop``: from its first message to the last one processed;
* the rebuild (``runtrail replay projection --into``'s code) into another fresh SQLite store.

Prints each rate and its ratio to the raw rate, checks that the service's store and the
rebuild agree run by run, and writes the figures to bench/results/.

    python -m bench.projector --events 300000 --baseline /tmp/base --rounds 3

measures only the rebuild, this checkout against another one (``git worktree add``), each run
in a child process whose imports come from that root, rounds interleaved on one topic filled
once, so a shared machine's load moves both alike; it prints wall-clock rates, CPU µs an event
(``time.process_time``, less sensitive to load) and checks each rebuilt store against the
first one. ``--topic`` reuses a topic already filled (``--fill-only`` makes one and keeps it),
e.g. to profile one child: ``python -m bench.projector --child ROOT BOOTSTRAP TOPIC 100 OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import (
    RESULTS,
    Rate,
    broker,
    create_topic,
    delete_topic,
    raw_consume,
    report,
    run_service,
)
from bench.runtime import publish
from bench.workload import workload
from runtrail.config import Settings
from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import compare_projections
from runtrail_services.noop.service import NoopService
from runtrail_services.projector.rebuild import rebuild_projection
from runtrail_services.projector.service import ProjectorService


def run_projector(settings: Settings, store_url: str, expected: int, snapshot_every: int) -> Rate:
    """The projector service until it processed everything (the stop flushes the rest, and the
    store is compared with the rebuild below)."""
    run = run_service(
        ProjectorService,
        "projector",
        settings,
        expected,
        label="projector service into SQLite (decode..apply..rows+offsets)",
        options={"store_url": store_url, "snapshot_every": str(snapshot_every)},
    )
    if run.status != 0:
        raise SystemExit(f"the projector stopped with status {run.status}")
    return run.rate


def run_rebuild(settings: Settings, store_url: str, snapshot_every: int) -> tuple[Rate, int]:
    store = open_store(PROJECTIONS, store_url)
    try:
        summary = rebuild_projection(settings, store, snapshot_every=snapshot_every)
    finally:
        store.close()
    rate = Rate(
        "replay projection --into fresh SQLite (read..write)",
        summary.events,
        summary.seconds,
    )
    return rate, summary.runs


def _child(bootstrap: str, topic: str, snapshot_every: str, store_path: str) -> None:
    """One rebuild in this process (whichever runtrail is first on sys.path): JSON figures."""
    settings = Settings(bootstrap_servers=bootstrap, events_topic=topic)
    store = open_store(PROJECTIONS, f"sqlite:///{store_path}")
    wall, before = time.monotonic(), os.times()
    try:
        summary = rebuild_projection(settings, store, snapshot_every=int(snapshot_every))
    finally:
        store.close()
    after, wall = os.times(), time.monotonic() - wall
    # this process and the worker processes it spawned and reaped (a parallel rebuild)
    cpu = sum(after[:4]) - sum(before[:4])
    figures = {"events": summary.events, "seconds": summary.seconds, "cpu": cpu, "wall": wall}
    print(json.dumps({**figures, "runs": summary.runs}))


def compare_replay(args: argparse.Namespace, bootstrap: str) -> None:
    """The rebuild of ``--baseline`` and of this checkout, interleaved, on one topic."""
    from bench.checkout import HERE, checkout_env
    from bench.services_baseline import _fill

    topic = args.topic or create_topic(bootstrap, args.partitions, prefix="benchreplay")
    roots = {"baseline": Path(args.baseline).resolve(), "this checkout": HERE}
    rates: dict[str, list[float]] = {label: [] for label in roots}
    cpus: dict[str, list[float]] = {label: [] for label in roots}
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        if not args.topic:
            print(f"filling {topic} with {args.events:,} events …", flush=True)
            _fill(bootstrap, topic, args.events)
        stores: list[Path] = []
        for round_no in range(args.rounds):
            for label, root in roots.items():
                store = work / f"{len(stores)}.db"
                cmd = [sys.executable, "-m", "bench.projector", "--child"]
                cmd += [bootstrap, topic, str(args.snapshot_every), str(store)]
                done = subprocess.run(cmd, env=checkout_env(root), capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"replay ({root}) failed: {done.stderr[-3000:]}")
                m = json.loads(done.stdout.strip().splitlines()[-1])
                rates[label].append(m["events"] / m["seconds"])
                cpus[label].append(m["cpu"] / m["events"] * 1e6)
                stores.append(store)
                whole = f", {m['events'] / m['wall']:,.0f}/s the whole call" if "wall" in m else ""
                print(
                    f"round {round_no + 1} {label:14s} {rates[label][-1]:>10,.0f} events/s "
                    f"{cpus[label][-1]:6.2f} µs CPU an event ({m['events']:,} events{whole})",
                    flush=True,
                )
        print(f"differences from the first store: {_differences(stores)}")
    finally:
        if not args.keep_topic and not args.topic:
            delete_topic(bootstrap, topic)
    _print_medians(rates, cpus)


def _differences(stores: list[Path]) -> list[int]:
    first = open_store(PROJECTIONS, f"sqlite:///{stores[0]}")
    counts = []
    try:
        for path in stores[1:]:
            other = open_store(PROJECTIONS, f"sqlite:///{path}")
            try:
                counts.append(len(compare_projections(first, other)))
            finally:
                other.close()
    finally:
        first.close()
    return counts


def _print_medians(rates: dict[str, list[float]], cpus: dict[str, list[float]]) -> None:
    old, new = statistics.median(rates["baseline"]), statistics.median(rates["this checkout"])
    old_cpu = statistics.median(cpus["baseline"])
    new_cpu = statistics.median(cpus["this checkout"])
    pairs = zip(rates["baseline"], rates["this checkout"], strict=True)
    ratios = " / ".join(f"{n / o:.2f}" for o, n in pairs)
    print(f"\nbaseline       {old:>10,.0f} events/s {old_cpu:6.2f} µs CPU an event")
    print(f"this checkout  {new:>10,.0f} events/s {new_cpu:6.2f} µs CPU an event")
    print(f"ratio {new / old:.2f}x (per round {ratios}); CPU {old_cpu / new_cpu:.2f}x")


def fill_only(args: argparse.Namespace, bootstrap: str) -> None:
    from bench.services_baseline import _fill

    topic = create_topic(bootstrap, args.partitions, prefix="benchreplay")
    _fill(bootstrap, topic, args.events)
    print(topic)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:6])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--snapshot-every", type=int, default=100)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--skip-noop", action="store_true", help="do not measure noop")
    parser.add_argument("--baseline", help="only the rebuild, against this other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topic", help="a topic already filled (with --baseline)")
    parser.add_argument("--keep-topic", action="store_true")
    parser.add_argument("--fill-only", action="store_true", help="fill a topic, print its name")
    args = parser.parse_args()
    if args.baseline or args.fill_only:
        with broker(args.bootstrap_servers) as bootstrap:
            (fill_only if args.fill_only else compare_replay)(args, bootstrap)
        return

    print(f"generating {args.events:,} events …", flush=True)
    events = list(workload(args.events))
    work = Path(tempfile.mkdtemp(prefix="bench-projector-"))
    live_url, rebuilt_url = f"sqlite:///{work / 'live.db'}", f"sqlite:///{work / 'rebuilt.db'}"
    with broker(args.bootstrap_servers) as bootstrap:
        topic = create_topic(bootstrap, args.partitions)
        settings = Settings(
            bootstrap_servers=bootstrap,
            events_topic=topic,
            dlq_topic=f"{topic}.dlq",
            group=f"bench-noop-{topic}",
            spool_dir=RESULTS / "spool",
        )
        rates: list[Rate] = []
        try:
            print("publishing …", flush=True)
            published = publish(settings, events)
            del events
            print("raw consume …", flush=True)
            raw = raw_consume(bootstrap, topic, args.events)
            if not args.skip_noop:
                print("noop service …", flush=True)
                rates.append(
                    run_service(
                        NoopService,
                        "noop",
                        settings,
                        args.events,
                        label="noop service through the runtime (decode..commit)",
                    ).rate
                )
            print("projector service …", flush=True)
            rates.append(run_projector(settings, live_url, args.events, args.snapshot_every))
            print("replay projection --into …", flush=True)
            rebuilt, runs = run_rebuild(settings, rebuilt_url, args.snapshot_every)
            rates.append(rebuilt)
        finally:
            delete_topic(bootstrap, topic)
    live, again = open_store(PROJECTIONS, live_url), open_store(PROJECTIONS, rebuilt_url)
    try:
        differences = len(compare_projections(live, again))
    finally:
        live.close()
        again.close()
    print(f"\n{runs:,} runs; the service's store and the rebuild differ in {differences} run(s)")
    report(
        "projector benchmark",
        [raw, *rates, published],
        raw,
        {
            "events": args.events,
            "partitions": args.partitions,
            "snapshot_every": args.snapshot_every,
            "runs": runs,
            "differences": differences,
        },
    )


if __name__ == "__main__":
    main()
