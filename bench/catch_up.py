"""Catching up on a backlog: ``noop``'s rate on a topic past the consumer's fetch queue beside
its rate on a topic that fits in it, round by round.

    python -m bench.catch_up --events 300000 --fits 80000 --rounds 3
    python -m bench.catch_up --variant "backoff 1 s=fetch.queue.backoff.ms=1000"

Why both topics: librdkafka stops fetching once its local queue holds
``queued.max.messages.kbytes`` (or ``queued.min.messages``) and waits
``fetch.queue.backoff.ms`` before it fetches again; a consumer that empties the queue faster
than that stalls. A topic that fits the queue never refills it, so its rate is the one a
backlog of any size should keep. The workload is ~630 bytes an event: 300,000 events are
~190 MB, 80,000 ~50 MB (the default queue is 64 MB).

``--baseline ROOT`` runs another checkout's defaults beside this one's (its library, this
bench). Each ``--variant LABEL=key=value,key=value`` runs ``noop`` with those librdkafka options
(through ``RUNTRAIL_KAFKA_OPTIONS``; ``batch.timeout.ms=N`` sets ``RUNTRAIL_BATCH_TIMEOUT_MS``)
beside the library's defaults; every contender runs in a fresh process (:mod:`bench.contender`),
interleaved, and the table gives each round's rates and the large topic's rate as a share of
the small one's in the same round. Beside each rate, how long the consuming thread was
blocked waiting for messages: a stall shows there even on a busy machine, where rates move by
several times between rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry

from bench.checkout import checkout_paths
from bench.contender import measure
from bench.harness import Rate, broker, create_topic, delete_topic
from bench.workload import workload
from runtrail.config import Settings
from runtrail.publisher import Publisher

DEFAULTS = "library defaults"


def fill(bootstrap: str, topic: str, events: int, work: Path) -> None:
    """``events`` workload events on ``topic`` through the publisher, all acknowledged."""
    settings = Settings(bootstrap_servers=bootstrap, events_topic=topic, spool_dir=work)
    publisher = Publisher(settings, registry=CollectorRegistry())
    for e in workload(events):
        publisher.publish(
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
    publisher.close()
    if left:
        raise SystemExit(f"{left} events not acknowledged")


def variant_env(spec: str) -> tuple[str, dict[str, str]]:
    """``LABEL=key=value,key=value`` as a label and the environment that applies it."""
    label, _, pairs = spec.partition("=")
    options: dict[str, str] = {}
    env: dict[str, str] = {}
    for pair in filter(None, pairs.split(",")):
        key, _, value = pair.partition("=")
        if key == "batch.timeout.ms":
            env["RUNTRAIL_BATCH_TIMEOUT_MS"] = value
        else:
            options[key] = value
    if options:
        env["RUNTRAIL_KAFKA_OPTIONS"] = json.dumps(options)
    return label, env


def noop_rate(bootstrap: str, topic: str, events: int, work: Path, env: dict[str, str]) -> Rate:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return measure("noop", bootstrap, topic, events, work)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=300_000, help="the backlog topic")
    parser.add_argument("--fits", type=int, default=80_000, help="the topic that fits the queue")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=k=v,k=v")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout: its defaults run as one more variant"
    )
    parser.add_argument("--bootstrap-servers")
    args = parser.parse_args()
    variants = [(DEFAULTS, {})] + [variant_env(v) for v in args.variant]
    if args.baseline is not None:
        root = args.baseline.resolve()
        variants.append((f"{root}", {"PYTHONPATH": checkout_paths(root)}))
    work = Path(tempfile.mkdtemp(prefix="bench-catch-up-"))
    rows: list[tuple[str, int, Rate, Rate]] = []
    with broker(args.bootstrap_servers) as bootstrap:
        large = create_topic(bootstrap, args.partitions)
        small = create_topic(bootstrap, args.partitions)
        try:
            print(f"filling {args.events:,} and {args.fits:,} events …", flush=True)
            fill(bootstrap, large, args.events, work / "spool-large")
            fill(bootstrap, small, args.fits, work / "spool-small")
            for round_no in range(1, args.rounds + 1):
                for label, env in variants:
                    fits = noop_rate(bootstrap, small, args.fits, work / "n", env)
                    backlog = noop_rate(bootstrap, large, args.events, work / "n", env)
                    rows.append((label, round_no, fits, backlog))
                    print(f"  round {round_no} {label}: {_cells(fits, backlog)}", flush=True)
        finally:
            delete_topic(bootstrap, large)
            delete_topic(bootstrap, small)
    print(
        f"\n| variant | round | {args.fits:,} events: ev/s (blocked s) "
        f"| {args.events:,} events: ev/s (blocked s) | backlog / fits |"
    )
    print("|---|---|---|---|---|")
    for label, round_no, fits, backlog in rows:
        print(f"| {label} | {round_no} | {_cells(fits, backlog, ' | ')} |")
    for label, _ in variants:
        ratios = [b.per_second / f.per_second for name, _, f, b in rows if name == label]
        blocked = [b.blocked or 0.0 for name, _, _, b in rows if name == label]
        print(
            f"{label}: backlog / fits median {statistics.median(ratios):.0%}, worst round "
            f"{min(ratios):.0%}; blocked on the backlog median {statistics.median(blocked):.2f} s"
        )


def _cells(fits: Rate, backlog: Rate, sep: str = ", ") -> str:
    return sep.join(
        [
            f"{fits.per_second:,.0f} ({fits.blocked or 0:.2f})",
            f"{backlog.per_second:,.0f} ({backlog.blocked or 0:.2f})",
            f"{backlog.per_second / fits.per_second:.0%}",
        ]
    )


if __name__ == "__main__":
    main()
