"""A stand-in agent process for the crash tests: publishes steadily and logs what was accepted.

    python tests/publisher_agent.py --bootstrap B --topic T --spool-dir D --log L --runs a,b

Each event ``publish()`` accepted is logged as one line ``<eventId> <runId> <monotonic ns>
<durable before ns>`` (the publisher's :attr:`~runtrail.publisher.Publisher.durable_before_ns`),
written with one unbuffered ``os.write`` right after publish() returned, so a SIGKILL loses
at most the line of the event being published. ``--count N`` publishes N events, then drains
and closes cleanly (exit 0); without it the agent publishes until it is killed.
"""

from __future__ import annotations

import argparse
import os
import time

from runtrail.config import Settings
from runtrail.publisher import Publisher


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--spool-dir", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--runs", required=True, help="comma-separated run IDs")
    parser.add_argument("--tenant", default="t1")
    parser.add_argument("--interval", type=float, default=0.004)
    parser.add_argument("--delivery-timeout-ms", type=int, default=3000)
    parser.add_argument("--count", type=int, default=0)
    args = parser.parse_args()

    settings = Settings(
        bootstrap_servers=args.bootstrap,
        events_topic=args.topic,
        spool_dir=args.spool_dir,
        tenant=args.tenant,
        delivery_timeout_ms=args.delivery_timeout_ms,
    )
    runs = args.runs.split(",")
    log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    publisher = Publisher(settings, retry_backoff_s=0.2, retry_backoff_max_s=1.0)
    os.write(log_fd, b"# started\n")
    i = 0
    while not args.count or i < args.count:
        run = runs[i % len(runs)]
        event_id = publisher.publish("MODEL_REASONING", run, {"text": f"thought {i}"})
        if event_id is not None:
            accepted_at, durable = time.monotonic_ns(), publisher.durable_before_ns
            os.write(log_fd, f"{event_id} {run} {accepted_at} {durable}\n".encode())
        i += 1
        time.sleep(args.interval)
    ok = publisher.drain(120)
    publisher.close(timeout=30)
    os.write(log_fd, f"# drained {ok} {publisher.stats()}\n".encode())
    raise SystemExit(0 if ok else 3)


if __name__ == "__main__":
    main()
