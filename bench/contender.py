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
from typing import TYPE_CHECKING, Any

from bench.harness import Rate

if TYPE_CHECKING:
    from runtrail.config import Settings

#: the names :func:`run` knows, in the order a round runs them
CONTENDERS = ("raw", "raw-decode", "noop", "quix-decode", "capture", "quix-capture")
#: the services measured once after the rounds (no peer), in that order, each through the
#: runtime at its own defaults
SERVICES = ("audit", "projector", "resume-cache", "sessions")


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
    if name in SERVICES:
        return _other_service(name, bootstrap, topic, events, work)
    known = ", ".join(CONTENDERS + SERVICES)
    raise SystemExit(f"unknown contender {name!r}: one of {known}")


def topic_settings(bootstrap: str, topic: str, work: Path, **extra: Any) -> Settings:
    """The settings of every runtrail contender and of the benchmark itself: the topic and the
    ones named after it (dead letters, audit, resume cache, sessions: deleted with it, so a
    benchmark's broker does not keep every run's output), spool and state under ``work``."""
    from runtrail.config import Settings

    return Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        audit_topic=f"{topic}.audit",
        resume_cache_topic=f"{topic}.cache",
        sessions_topic=f"{topic}.sessions",
        spool_dir=work / "spool",
        state_dir=work / "state",
        **extra,
    )


def _service(name: str, bootstrap: str, topic: str, events: int, work: Path) -> Rate:
    from bench.harness import run_service
    from bench.quix_peers import COMMIT_INTERVAL_S
    from runtrail_services.capture.service import CaptureService
    from runtrail_services.noop.service import NoopService

    # the Quix apps' commit interval: both flush (fsync) and commit equally often
    settings = topic_settings(
        bootstrap, topic, work, commit_interval_ms=int(COMMIT_INTERVAL_S * 1000)
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


def _other_service(name: str, bootstrap: str, topic: str, events: int, work: Path) -> Rate:
    """A service without a peer, at its own defaults (its commit interval included); the
    audit publishes its sealed links to ``TOPIC.audit`` (made by the caller), resume-cache
    writes ``TOPIC.cache`` (made by the service)."""
    from bench.harness import run_service
    from runtrail.persistence.urls import sqlite_url
    from runtrail_services.audit.service import AuditService
    from runtrail_services.projector.service import ProjectorService
    from runtrail_services.resume_cache.service import ResumeCacheService
    from runtrail_services.sessions.service import SessionsService
    from runtrail_tools.kafka.ports import free_ports

    settings = topic_settings(bootstrap, topic, work)
    (port,) = free_ports(1)
    runs: dict[str, tuple[Any, str, dict[str, str], str]] = {
        "audit": (
            AuditService,
            "runtrail audit (SQLite, sealed links published)",
            {
                "store_url": sqlite_url(work / "audit.db"),
                "tree_head_interval_s": "10",
                "publish": "true",
            },
            "runtrail_audit_links_sealed_total",
        ),
        "projector": (
            ProjectorService,
            "runtrail projector (SQLite)",
            {"store_url": sqlite_url(work / "projection.db"), "snapshot_every": "100"},
            "runtrail_processed_total",
        ),
        "resume-cache": (
            ResumeCacheService,
            "runtrail resume-cache (SQLite, cache topic)",
            {
                "store_url": sqlite_url(work / "cache.db"),
                "http_port": str(port),
                "tokens": '{"bench": "bench-token-0123456789abcdef"}',
            },
            "runtrail_processed_total",
        ),
        "sessions": (
            SessionsService,
            "runtrail sessions (file store)",
            {},
            "runtrail_processed_total",
        ),
    }
    factory, label, options, metric = runs[name]
    return run_service(
        factory, name, settings, events, label=label, options=options, done_metric=metric
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
    parser.add_argument("name", choices=CONTENDERS + SERVICES)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--work", type=Path, required=True, help="output and state go here")
    args = parser.parse_args()
    rate = run(args.name, args.bootstrap, args.topic, args.events, args.work)
    print(json.dumps(asdict(rate)), flush=True)


if __name__ == "__main__":
    main()
