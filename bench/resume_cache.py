"""Benchmark of the resume-cache service: events/s through it, and lookups/s against it.

    python -m bench.resume_cache --events 200000 --lookups 20000 --threads 4

Fills a fresh topic with the realistic workload through the publisher, reads it once with a
bare librdkafka consumer (the raw rate, our baseline), then runs the ``resume-cache`` service
through the runtime (decode … pair into entries … compacted topic acknowledged … SQLite commit
with offsets) until it has processed every event, and prints both rates with their ratio.
With the service still up, it times HTTP lookups over keep-alive connections from
``--threads`` threads: hits (keys of entries the workload produced) and misses (absent keys, no
read-your-writes barrier), with p50/p99 latency.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench.harness import Rate, broker, create_topic, delete_topic, raw_consume, report, run_service
from bench.runtime import publish
from bench.workload import workload
from runtrail.config import Settings
from runtrail.persistence.urls import sqlite_url
from runtrail.resume.http_client import ServiceCacheClient
from runtrail.resume.keys import Kind, Scope, model_key, tool_key
from runtrail_services.resume_cache.service import ResumeCacheService
from runtrail_tools.kafka.ports import free_ports

TOKEN = "bench-token"


def entry_keys(events: list[dict[str, Any]]) -> list[tuple[str, Kind, str]]:
    """(run, kind, key) of every entry the workload yields (model at STEP_END, tool at result)."""
    keys = []
    for event in events:
        data = event["data"]
        if event["type"] == "MODEL_REQUEST":
            keys.append((event["runId"], Kind.MODEL, model_key(data["prompt"])))
        elif event["type"] == "TOOL_CALL":
            keys.append((event["runId"], Kind.TOOL, tool_key(data["toolName"], data["arguments"])))
    return keys


def lookups(
    url: str, tenant: str, targets: list[tuple[str, Kind, str]], count: int, threads: int, name: str
) -> tuple[Rate, float, float]:
    """``count`` lookups split over ``threads`` threads; the rate and p50/p99 latency (ms)."""
    client = ServiceCacheClient(url, TOKEN, wait_ms=0)
    latencies: list[float] = []
    lock = threading.Lock()
    per = count // threads

    def work(seed: int) -> None:
        rng = random.Random(seed)
        mine = []
        for _ in range(per):
            run, kind, key = rng.choice(targets)
            t0 = time.perf_counter()
            client.lookup(
                tenant=tenant, run_id=run, kind=kind, key=key, scope=Scope.RUN, min_offsets={}
            )
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    return Rate(name, len(latencies), elapsed), p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--bootstrap-servers")
    args = parser.parse_args()

    print(f"generating {args.events:,} events …", flush=True)
    events = list(workload(args.events))
    keys = entry_keys(events)
    tenant = events[0]["tenantId"]
    home = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    with broker(args.bootstrap_servers) as bootstrap:
        topic = create_topic(bootstrap, args.partitions)
        settings = Settings(
            bootstrap_servers=bootstrap,
            events_topic=topic,
            dlq_topic=f"{topic}.dlq",
            resume_cache_topic=f"{topic}.cache",
            group=f"bench-resume-{topic}",
            spool_dir=home / "spool",
            state_dir=home,
        )
        (port,) = free_ports(1)
        options = {
            "store_url": sqlite_url(home / "cache.db"),
            "http_port": str(port),
            "tokens": f'{{"{tenant}": "{TOKEN}"}}',
        }
        try:
            print("publishing …", flush=True)
            published = publish(settings, events)
            del events
            print("raw consume …", flush=True)
            raw = raw_consume(bootstrap, topic, args.events)
            print("resume-cache service …", flush=True)
            url = f"http://127.0.0.1:{port}"

            def load() -> tuple[Any, Any]:
                time.sleep(1.5)  # let the last flush land, so hits come from the store
                print("lookups …", flush=True)
                absent = [(run, kind, f"{i:064x}") for i, (run, kind, _) in enumerate(keys[:5000])]
                return (
                    lookups(url, tenant, keys, args.lookups, args.threads, "lookups: hits"),
                    lookups(url, tenant, absent, args.lookups, args.threads, "lookups: misses"),
                )

            run = run_service(
                ResumeCacheService,
                "resume-cache",
                settings,
                args.events,
                label="resume-cache service (decode..pair..topic..sqlite)",
                options=options,
                while_running=load,
            )
            through = run.rate
            (hits, hit50, hit99), (misses, miss50, miss99) = run.extra
        finally:
            delete_topic(bootstrap, topic)
            admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until done
            for future in admin.delete_topics([f"{topic}.cache"]).values():
                try:
                    future.result(60)
                except Exception as exc:  # best effort clean-up
                    print(f"could not delete {topic}.cache: {exc}")
    report(
        "resume-cache benchmark",
        [raw, through, published],
        raw,
        {
            "events": args.events,
            "partitions": args.partitions,
            "entries": len(keys),
            "lookups": {
                "threads": args.threads,
                "hits_per_second": hits.per_second,
                "hit_p50_ms": hit50,
                "hit_p99_ms": hit99,
                "misses_per_second": misses.per_second,
                "miss_p50_ms": miss50,
                "miss_p99_ms": miss99,
            },
        },
    )
    print(f"\nlookups over HTTP ({args.threads} threads, keep-alive):")
    for rate, p50, p99 in ((hits, hit50, hit99), (misses, miss50, miss99)):
        print(
            f"  {rate.name:<16} {rate.events:>8} in {rate.seconds:6.2f}s  {rate.per_second:>9,.0f}/s  p50 {p50:.2f} ms  p99 {p99:.2f} ms"
        )


if __name__ == "__main__":
    main()
