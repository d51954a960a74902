"""One contender of :mod:`bench.compare`, in a process of its own.

    python -m bench.contender NAME --bootstrap HOST:PORT --topic T --events N --work DIR

Why a process each: that is how every contender runs in production (``runtrail noop`` is a
process, so is a Quix app), and it keeps a contender from paying for what the ones before
it left behind in the benchmark's process: the generated workload, earlier consumers'
threads and heaps. (Run in the benchmark's own process, ``noop``'s later rounds measured
up to 40 % slower than its first while the Quix app's did not.) Each contender is timed from
its first consumed message, so start-up and imports are not counted. The runtrail services
flush and commit at the Quix apps' interval (``quix_peers.COMMIT_INTERVAL_S``, Quix's
default), not at runtrail's own default of one second. The last line printed is the rate as
JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from dataclasses import asdict
from pathlib import Path

from bench.harness import Rate

#: the names :func:`run` knows, in the order a round runs them
CONTENDERS = ("raw", "raw-decode", "noop", "quix-decode", "capture", "quix-capture")


def run(name: str, bootstrap: str, topic: str, events: int, work: Path) -> Rate:
    """Measure one contender here, in this process."""
    if name == "raw":
        from bench.harness import raw_consume

        return raw_consume(bootstrap, topic, events)
    if name == "raw-decode":
        from bench.harness import raw_decode

        return raw_decode(bootstrap, topic, events)
    if name == "quix-decode":
        from bench.quix_peers import quix_decode

        return quix_decode(bootstrap, topic, events)
    if name == "quix-capture":
        from bench.quix_peers import quix_capture

        return quix_capture(bootstrap, topic, events, work)
    if name in ("noop", "capture"):
        return _service(name, bootstrap, topic, events, work)
    raise SystemExit(f"unknown contender {name!r}: one of {', '.join(CONTENDERS)}")


def _service(name: str, bootstrap: str, topic: str, events: int, work: Path) -> Rate:
    from bench.harness import run_service
    from bench.quix_peers import COMMIT_INTERVAL_S
    from runtrail.config import Settings
    from runtrail_services.capture.service import CaptureService
    from runtrail_services.noop.service import NoopService

    settings = Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        spool_dir=work / "spool",
        state_dir=work / "state",
        # the Quix apps' commit interval: both flush (fsync) and commit equally often
        commit_interval_ms=int(COMMIT_INTERVAL_S * 1000),
    )
    group = f"bench-{name}-{uuid.uuid4().hex[:8]}"  # every run reads the topic from the start
    if name == "noop":
        return run_service(
            NoopService, name, settings, events, label="runtrail noop", group=group
        ).rate
    return run_service(
        CaptureService,
        name,
        settings,
        events,
        label="runtrail capture to JSONL",
        options={"sink_url": work.as_uri(), "idle_flush_s": "3600"},
        group=group,
    ).rate


def measure(name: str, bootstrap: str, topic: str, events: int, work: Path) -> Rate:
    """Run one contender in a fresh Python process and read back its rate."""
    work.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.contender",
            name,
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--events",
            str(events),
            "--work",
            str(work),
        ],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"contender {name} exited with status {done.returncode}")
    return Rate(**json.loads(lines[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", choices=CONTENDERS)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True, help="output and state go here")
    args = parser.parse_args()
    rate = run(args.name, args.bootstrap, args.topic, args.events, args.work)
    print(json.dumps(asdict(rate)), flush=True)


if __name__ == "__main__":
    main()
