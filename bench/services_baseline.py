"""Each service through the runtime, this checkout against another one, interleaved in one run.

    python -m bench.services_baseline --baseline /path/to/older/checkout --events 100000

A before/after ratio means something only when both sides ran on the same machine at the same
time: this fills one topic once, then runs each service (``--services``) in a child process
whose imports come from ROOT/shared, ROOT/services and ROOT/schemas, alternating baseline and
this checkout for ``--rounds`` rounds, and prints the medians and their ratio. ``--profile``
adds a cProfiled run of this checkout per service, after the rounds and not counted in them
(``bench/results/services-*.pstats``).

Beside each rate it reports the CPU the service's process used per event (every thread, from
the first message consumed to the last event done): on a machine other work shares,
wall-clock rates move by several times between rounds, CPU per event much less.
A checkout for the baseline: ``git worktree add /tmp/base <commit>``.

Every measurement writes to a folder of its own, all deleted after the last round: a folder
deleted between rounds made the next round's file creations slow on ext4 without a journal
(sessions: 20,000 instead of 42,000 events/s). ``--deleted-before N`` makes that state on
purpose before each measurement, to compare checkouts there. ``--random-event-ids`` fills the
topic with random eventIds instead of time-ordered ones (the stores index events by ID).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.checkout import HERE, checkout_env
from bench.harness import RESULTS, broker, create_topic, delete_topic

#: service -> (module:class, options builder(work dir), metric that counts its done events)
SERVICES: dict[str, tuple[str, Any, str]] = {
    "noop": ("runtrail_services.noop.service:NoopService", lambda w: {}, "processed"),
    "capture": (
        "runtrail_services.capture.service:CaptureService",
        lambda w: {"sink_url": (w / "capture").as_uri(), "idle_flush_s": "3600"},
        "processed",
    ),
    "audit": (
        "runtrail_services.audit.service:AuditService",
        lambda w: {
            "store_url": f"sqlite:///{w / 'audit.db'}",
            "tree_head_interval_s": "10",
            "publish": "true",
        },
        "runtrail_audit_links_sealed_total",
    ),
    "projector": (
        "runtrail_services.projector.service:ProjectorService",
        lambda w: {"store_url": f"sqlite:///{w / 'projection.db'}", "snapshot_every": "100"},
        "processed",
    ),
    "sessions": ("runtrail_services.sessions.service:SessionsService", lambda w: {}, "processed"),
    "resume-cache": (
        "runtrail_services.resume_cache.service:ResumeCacheService",
        lambda w: {
            "store_url": f"sqlite:///{w / 'cache.db'}",
            "http_port": str(_free_port()),
            "tokens": '{"bench": "bench-token-0123456789abcdef"}',
        },
        "processed",
    ),
}


def _free_port() -> int:
    from runtrail_tools.kafka.ports import free_ports

    (port,) = free_ports(1)
    return port


def _child(
    service: str, bootstrap: str, topic: str, expected: str, profile: str, folder: str
) -> None:
    """One measurement in this process, with whichever runtrail is first on sys.path; its
    files go to ``folder``, which the parent deletes after the last round (not before the
    next: see :func:`_churn`)."""
    import importlib

    from bench.contender import topic_settings
    from bench.harness import run_service

    target, options, metric = SERVICES[service]
    module, _, name = target.partition(":")
    factory = getattr(importlib.import_module(module), name)
    work = Path(folder)
    settings = topic_settings(bootstrap, topic, work)
    done = "runtrail_processed_total" if metric == "processed" else metric
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    run = run_service(
        factory,
        service,
        settings,
        int(expected),
        options=options(work),
        done_metric=done,
        group=f"bench-{service}-{uuid.uuid4().hex[:8]}",
    )
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu = run.cpu_seconds
    print(json.dumps({"events": run.rate.events, "seconds": run.rate.seconds, "cpu": cpu}))


def _churn(folder: Path, count: int) -> None:
    """Create ``count`` files in ``folder`` and delete them. On ext4 without a journal, every
    inode freed in the last minute (five if its table block is not written back yet) is
    skipped, one by one, by each allocation after it: a folder deleted before a round slows
    whatever makes files in that round. The rounds' folders are therefore kept to the end,
    and this makes that state on purpose, the same for both checkouts."""
    if count <= 0:
        return
    folder.mkdir()
    for index in range(count):
        (folder / str(index)).touch()
    shutil.rmtree(folder)


def _fill(bootstrap: str, topic: str, events: int, *, time_ordered_ids: bool = True) -> None:
    """The benchmark workload on ``topic``, encoded by this checkout's codec, with headers."""
    from confluent_kafka import Producer

    from bench.workload import workload
    from runtrail.events import EventCodec
    from runtrail.publisher.headers import event_headers

    codec = EventCodec()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for form in workload(events, time_ordered_ids=time_ordered_ids):
        value = codec.encode_json_form(form)
        while True:
            try:
                producer.produce(
                    topic, value, key=form["runId"].encode(), headers=list(event_headers(form))
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120):
        raise SystemExit("could not deliver the workload")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:8])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--services", default="noop,capture,audit,projector,resume-cache,sessions")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument(
        "--deleted-before",
        type=int,
        default=0,
        metavar="N",
        help="create and delete N files beside the service's folder before each measurement "
        "(what a file system looks like after a cleanup or a retention pass)",
    )
    parser.add_argument(
        "--random-event-ids",
        action="store_true",
        help="random (version 4) eventIds, as writers other than runtrail's publisher may "
        "stamp them, instead of the publisher's time-ordered ones",
    )
    args = parser.parse_args()
    services = args.services.split(",")
    unknown = [s for s in services if s not in SERVICES]
    if unknown:
        parser.error(f"unknown service(s) {unknown}; known: {', '.join(SERVICES)}")
    roots = {"baseline": args.baseline.resolve(), "this checkout": HERE}
    results: dict[str, dict[str, list[float]]] = {s: {} for s in services}
    cpu_us: dict[str, dict[str, list[float]]] = {s: {} for s in services}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    scratch = Path(tempfile.mkdtemp(prefix="runtrail-services-"))
    with broker(args.bootstrap_servers) as bootstrap:
        topic = create_topic(bootstrap, args.partitions, prefix="benchsvc")
        try:
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": bootstrap})
            audit = NewTopic(f"{topic}.audit", args.partitions, 1)
            for future in admin.create_topics([audit]).values():
                future.result(60)
            cache = NewTopic(f"{topic}.cache", args.partitions, 1)
            for future in admin.create_topics([cache]).values():
                future.result(60)
            print(f"filling {topic} with {args.events:,} events …", flush=True)
            _fill(bootstrap, topic, args.events, time_ordered_ids=not args.random_event_ids)
            RESULTS.mkdir(exist_ok=True)

            def measure(service: str, root: Path, profile: str = "") -> tuple[float, float]:
                folder = Path(tempfile.mkdtemp(prefix=f"{service}-", dir=scratch))
                _churn(folder.with_name(folder.name + "-churn"), args.deleted_before)
                cmd = [sys.executable, "-m", "bench.services_baseline", "--child"]
                cmd += [service, bootstrap, topic, str(args.events), profile, str(folder)]
                done = subprocess.run(cmd, env=checkout_env(root), capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"{service} ({root}) failed: {done.stderr[-3000:]}")
                m = json.loads(done.stdout.strip().splitlines()[-1])
                return float(m["events"] / m["seconds"]), 1e6 * float(m["cpu"]) / m["events"]

            for round_no in range(args.rounds):
                for service in services:
                    for label, root in roots.items():
                        rate, cpu = measure(service, root)
                        results[service].setdefault(label, []).append(rate)
                        cpu_us[service].setdefault(label, []).append(cpu)
                        print(
                            f"round {round_no + 1} {service:10s} {label:14s} {rate:>10,.0f} "
                            f"events/s {cpu:>8.1f} µs CPU/event",
                            flush=True,
                        )
            if args.profile:  # an extra run each, not counted: the profiler slows it down
                for service in services:
                    path = RESULTS / f"services-{service}-{stamp}.pstats"
                    measure(service, HERE, str(path))
                    print(f"profile of {service}: {path}", flush=True)
        finally:
            delete_topic(bootstrap, topic, f"{topic}.audit", f"{topic}.cache", f"{topic}.sessions")
            shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"\n{'service':<12} {'baseline':>12} {'this checkout':>14} {'ratio':>7}"
        f" {'CPU µs/event: baseline':>23} {'this':>6} {'ratio':>6}"
    )
    summary: dict[str, Any] = {}
    for service, by_root in results.items():
        old = statistics.median(by_root["baseline"])
        new = statistics.median(by_root["this checkout"])
        old_cpu = statistics.median(cpu_us[service]["baseline"])
        new_cpu = statistics.median(cpu_us[service]["this checkout"])
        summary[service] = {
            "baseline": old,
            "this": new,
            "ratio": new / old,
            "runs": by_root,
            "cpu_us_per_event": {"baseline": old_cpu, "this": new_cpu, "runs": cpu_us[service]},
        }
        print(
            f"{service:<12} {old:>12,.0f} {new:>14,.0f} {new / old:>6.2f}x"
            f" {old_cpu:>23.1f} {new_cpu:>6.1f} {old_cpu / new_cpu:>5.2f}x"
        )
    out = RESULTS / f"services_baseline-{stamp}.json"
    payload = {"events": args.events, "baseline": str(args.baseline), **summary}
    out.write_text(json.dumps(payload, indent=2))
    print(f"\nresults written to {out} (medians of {args.rounds} interleaved rounds)")


if __name__ == "__main__":
    main()
