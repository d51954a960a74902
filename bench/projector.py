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
"""

from __future__ import annotations

import argparse
import tempfile
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
from runtrail.projection import compare_projections, open_projection_store
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
    store = open_projection_store(store_url)
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--snapshot-every", type=int, default=100)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--skip-noop", action="store_true", help="do not measure noop")
    args = parser.parse_args()

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
    live, again = open_projection_store(live_url), open_projection_store(rebuilt_url)
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
