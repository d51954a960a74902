"""Benchmark of the foundation: publisher, raw consume, and the ``noop`` service's runtime.

    python -m bench.runtime --events 1000000

Fills a fresh topic with realistic events through the :class:`~runtrail.publisher.Publisher`
(timed: the publisher's rate), then reads it back twice — with a bare librdkafka consumer that
polls and discards (the raw rate, our baseline) and with the ``noop`` service through the
runtime (decode, upcast, validate, sequence checks, commit) — and prints both with their ratio.
``--profile`` writes a pyinstrument profile of the runtime run to bench/results/.
"""

from __future__ import annotations

import argparse
import time

from prometheus_client import CollectorRegistry

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
from bench.workload import workload
from runtrail.config import Settings
from runtrail.publisher import Publisher
from runtrail_services.noop.service import NoopService


def publish(settings: Settings, events: list[dict[str, object]]) -> Rate:
    publisher = Publisher(settings, registry=CollectorRegistry())
    started = time.perf_counter()
    for i, event in enumerate(events):
        publisher.on_event(event)
        if i and i % 200_000 == 0:
            print(f"  published {i:,} …", flush=True)
    publisher.flush(120)
    elapsed = time.perf_counter() - started
    stats = publisher.stats()
    publisher.close()
    if stats.rejected or stats.spooled:
        raise SystemExit(f"publisher did not deliver everything: {stats}")
    return Rate("publisher (validate, redact, encode, produce, ack)", len(events), elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    print(f"generating {args.events:,} events …", flush=True)
    events = list(workload(args.events))
    with broker(args.bootstrap_servers) as bootstrap:
        topic = create_topic(bootstrap, args.partitions)
        settings = Settings(
            bootstrap_servers=bootstrap,
            events_topic=topic,
            dlq_topic=f"{topic}.dlq",
            group=f"bench-noop-{topic}",
            spool_dir=RESULTS / "spool",
        )
        try:
            print("publishing …", flush=True)
            published = publish(settings, events)
            del events
            print("raw consume …", flush=True)
            raw = raw_consume(bootstrap, topic, args.events)
            print("noop service …", flush=True)
            noop = run_service(
                NoopService,
                "noop",
                settings,
                args.events,
                label="noop service through the runtime (decode..commit)",
                profile=args.profile,
            ).rate
        finally:
            delete_topic(bootstrap, topic)
    report(
        "runtime benchmark",
        [raw, noop, published],
        raw,
        {"events": args.events, "partitions": args.partitions},
    )


if __name__ == "__main__":
    main()
