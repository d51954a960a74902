"""What the write-ahead spool costs the publisher: events/s with and without it, and the ratio.

    python -m bench.publisher --events 200000

Publishes the same realistic events through :class:`~runtrail.publisher.Publisher` twice, each
to a fresh topic, and waits until every event is acknowledged: once as shipped (every accepted
event written to the spool and fsynced once per ``spool_commit_ms``), once with the spool's
group commit replaced by a no-op (what the publisher costs without durability). The spool
folder of the first run lives under ``--spool-dir`` (default ``bench/results/spool``): put it
on the disk an agent would use.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from bench.harness import RESULTS, Rate, broker, create_topic, delete_topic, report
from bench.workload import workload
from runtrail.config import Settings
from runtrail.publisher import Publisher, SpoolRecord

#: CPU time per event of each run, by durability: less sensitive to a busy machine than rates.
CPU_US: dict[bool, list[float]] = {}


def publish(settings: Settings, events: list[dict[str, object]], durable: bool) -> Rate:
    publisher = Publisher(settings, registry=CollectorRegistry())
    if not durable:

        def no_commit(records: Sequence[SpoolRecord], sync: bool = True) -> None:
            return None

        publisher._wal.append = no_commit  # type: ignore[method-assign]
    started, cpu = time.perf_counter(), time.process_time()
    for event in events:
        publisher.on_event(event)
    left = publisher.flush(300)
    elapsed = time.perf_counter() - started
    cpu_us = (time.process_time() - cpu) / len(events) * 1e6  # all threads, librdkafka's too
    stats = publisher.stats()
    folder = Path(publisher.spool_path)
    written = sum(p.stat().st_size for p in folder.glob("*.seg"))
    publisher.close()
    if left or stats.rejected or stats.spooled:
        raise SystemExit(f"publisher did not deliver everything: {left} left, {stats}")
    label = "with the write-ahead spool" if durable else "without (group commit a no-op)"
    print(
        f"  {label}: {len(events) / elapsed:,.0f} events/s, {cpu_us:.1f} µs CPU an event, "
        f"{written:,} bytes left in the spool"
    )
    CPU_US.setdefault(durable, []).append(cpu_us)
    return Rate(f"publisher {label}", len(events), elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="alternate the two this often")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--spool-dir", type=Path, default=RESULTS / "spool")
    args = parser.parse_args()

    print(f"generating {args.events:,} events …", flush=True)
    events = list(workload(args.events))
    best: dict[bool, Rate] = {}
    with broker(args.bootstrap_servers) as bootstrap, tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            for durable in (True, False):
                topic = create_topic(bootstrap, args.partitions)
                settings = Settings(
                    bootstrap_servers=bootstrap,
                    events_topic=topic,
                    spool_dir=args.spool_dir if durable else Path(scratch),
                )
                try:
                    rate = publish(settings, events, durable)
                finally:
                    delete_topic(bootstrap, topic)
                if durable not in best or rate.per_second > best[durable].per_second:
                    best[durable] = rate
    with_wal, without = best[True], best[False]
    ratio = with_wal.per_second / without.per_second
    cpu_with, cpu_without = min(CPU_US[True]), min(CPU_US[False])
    print(f"\nwith / without the write-ahead spool: {ratio:.0%} of the rate (best of each)")
    print(f"CPU an event: {cpu_with:.1f} µs with, {cpu_without:.1f} µs without (least of each)")
    report(
        "publisher benchmark (best of each)",
        [without, with_wal],
        without,
        {
            "events": args.events,
            "partitions": args.partitions,
            "spool_commit_ms": Settings().spool_commit_ms,
            "ratio": ratio,
            "cpu_us_per_event": {"with": CPU_US[True], "without": CPU_US[False]},
        },
    )


if __name__ == "__main__":
    main()
