"""Benchmark of the audit service: events sealed and persisted per second, beside raw consume.

    python -m bench.audit --events 200000 [--store postgresql://…] [--with-noop] [--no-publish]

Fills a fresh topic with the realistic workload through the publisher, then, in the same run:

1. reads it with a bare librdkafka consumer that polls and discards (the raw rate, baseline);
2. optionally, the ``noop`` service through the runtime (the runtime's own cost);
3. the ``audit`` service through the runtime: decode, seal every event onto its run's chain,
   write links + offsets in one transaction per flush, publish the links to an audit topic and
   wait for their acknowledgement; timed from its first consumed message until the store has
   committed the last link (``runtrail_audit_links_sealed_total``);
4. ``runtrail audit verify --file`` (a child process, start-up included) on an export of one
   long chain of the same events, and the standalone ``tools/verify_audit_export.py`` on it.

Each rate is printed with its ratio to the raw rate measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import Rate, broker, create_topic, delete_topic, raw_consume, report, run_service
from bench.runtime import publish
from bench.workload import workload
from runtrail.audit.export import write_export
from runtrail.audit.link import Link, genesis_head, seal
from runtrail.config import Settings
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.service import AuditService
from runtrail_services.noop.service import NoopService

ROOT = Path(__file__).resolve().parents[1]


AUDIT_LABELS = {
    True: "audit service: sealed + persisted (+ published)",
    False: "audit service: sealed + persisted (not published)",
}


def long_chain_export(events: list[dict[str, Any]], path: Path) -> int:
    """One chain of all ``events`` (re-labelled as one run), written as an export."""
    head = genesis_head("bench", "one-long-run")
    links: list[Link] = []
    for event in events:
        link = seal(head.length, head.hash, {**event, "runId": head.run_id})
        links.append(link)
        head = head.__class__(head.tenant_id, head.run_id, head.length + 1, link.hash)
    return write_export(path, links)


def timed_verify(name: str, argv: list[str], expected: int) -> Rate:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    if proc.returncode != 0 or not verdict["valid"] or verdict["length"] != expected:
        raise SystemExit(f"{name} did not verify the export: {proc.stdout} {proc.stderr}")
    return Rate(name, expected, elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--store", help="audit store URL (default: a fresh SQLite file)")
    parser.add_argument("--with-noop", action="store_true", help="also time the noop service")
    parser.add_argument(
        "--no-publish", action="store_true", help="seal and persist only (no audit topic)"
    )
    args = parser.parse_args()

    print(f"generating {args.events:,} events …", flush=True)
    events = list(workload(args.events))
    work = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    store_url = args.store or sqlite_url(work / "audit.db")
    store = open_store(AUDIT_LINKS, store_url)
    if store.heads():  # the workload is deterministic: its events would all be sealed already
        raise SystemExit("the audit store is not empty: give an empty one (--store)")
    store.close()
    rates: list[Rate] = []
    with broker(args.bootstrap_servers) as bootstrap:
        topic = create_topic(bootstrap, args.partitions)
        audit_topic = f"{topic}.audit"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(audit_topic, args.partitions, 1)]).values():
            future.result(60)
        settings = Settings(
            bootstrap_servers=bootstrap,
            events_topic=topic,
            dlq_topic=f"{topic}.dlq",
            audit_topic=audit_topic,
            spool_dir=work / "spool",
            state_dir=work / "state",
        )
        try:
            print("publishing …", flush=True)
            publish(settings, events)
            print("raw consume …", flush=True)
            raw = raw_consume(bootstrap, topic, args.events)
            rates.append(raw)
            if args.with_noop:
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
            print(f"audit service into {store_url.split('@')[-1]} …", flush=True)
            options = {
                "store_url": store_url,
                "tree_head_interval_s": "10",
                "publish": str(not args.no_publish).lower(),
            }
            rates.append(
                run_service(
                    AuditService,
                    "audit",
                    settings,
                    args.events,
                    label=AUDIT_LABELS[not args.no_publish],
                    options=options,
                    done_metric="runtrail_audit_links_sealed_total",
                ).rate
            )
        finally:
            delete_topic(bootstrap, topic)
            AdminClient({"bootstrap.servers": bootstrap}).delete_topics([audit_topic])
    store = open_store(AUDIT_LINKS, store_url)
    runs = len(store.heads())
    store.close()

    export = work / "long-run.jsonl"
    print("exporting one long chain …", flush=True)
    count = long_chain_export(events, export)
    del events
    print("audit verify --file …", flush=True)
    cli = [
        sys.executable,
        "-m",
        "runtrail_tools.cli.main",
        "audit",
        "verify",
        "--file",
        str(export),
    ]
    rates.append(timed_verify("runtrail audit verify --file (links, process)", cli, count))
    script = [sys.executable, "-I", str(ROOT / "tools" / "verify_audit_export.py"), str(export)]
    rates.append(timed_verify("tools/verify_audit_export.py (links, process)", script, count))
    report(
        "audit benchmark",
        rates,
        raw,
        {
            "events": args.events,
            "partitions": args.partitions,
            "store": store_url.split("://")[0],
            "published": not args.no_publish,
            "runs": runs,
            "export_bytes": export.stat().st_size,
        },
    )


if __name__ == "__main__":
    main()
