"""The publisher's own rate, on one core: ``Publisher.publish`` in a tight loop and ``runtrail
publish`` of a JSONL file, for this checkout and (optionally) another one, interleaved.

    python -m bench.publisher_loop --events 100000 --baseline /work/main

Each measurement runs in a child process pinned to one CPU (``--cpu``), so librdkafka's
threads share that core with Python: the rate is what one core gives. Reported per contender:
events/s (wall, median of ``--rounds`` interleaved rounds) and CPU µs per event (all threads;
1e6 / that is the one-core rate on an idle core, less sensitive to a busy machine than wall
time), and for ``publish`` and ``submit`` that CPU thread by thread (the agent's thread is
``MainThread``, librdkafka's are ``rdk:``). ``--baseline ROOT`` measures the code under ROOT/shared in the same run (before/after
ratios from one run). Every event is acknowledged before the clock stops. ``--modes
bare,bare-batch`` add the ceiling: the bare client producing the same records, pre-encoded.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.checkout import HERE, checkout_env
from bench.harness import RESULTS, broker, create_topic, delete_topic
from bench.workload import workload


def _bare_child(mode: str, settings: Any, events: list[dict[str, Any]]) -> None:
    """The ceiling under the publisher: the bare client producing the very records it would
    (value, key, headers; one shared delivery callback; the publisher's producer settings),
    already encoded before the clock starts. ``bare-batch``: ``produce_batch``, which takes no
    headers, in chunks of 10,000, the cheapest way to hand records to librdkafka from Python."""
    from confluent_kafka import Producer

    from runtrail.events import EventCodec
    from runtrail.kafka.producer_config import producer_config
    from runtrail.publisher.headers import event_headers

    codec = EventCodec()
    records = [
        (e["runId"].encode(), codec.encode_json_form(e), list(event_headers(e))) for e in events
    ]
    producer = Producer(producer_config(settings))
    acked = [0]

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked[0] += 1

    topic = settings.events_topic
    started, cpu = time.perf_counter(), time.process_time()
    if mode == "bare":
        for key, value, headers in records:
            while True:
                try:
                    producer.produce(topic, value, key, headers=headers, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.005)
    else:
        for at in range(0, len(records), 10_000):
            chunk = [{"key": k, "value": v} for k, v, _ in records[at : at + 10_000]]
            producer.produce_batch(topic, chunk, on_delivery=report)
            producer.poll(0)
    left = producer.flush(300)
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    if left or acked[0] != len(records):
        raise SystemExit(f"not everything was delivered: {left} left, {acked[0]} acknowledged")
    print(json.dumps({"seconds": elapsed, "cpu": used, "events": len(records)}))


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process so far (its schedstat), by name: a Python
    thread's name without its ``[topic]`` suffix, else the kernel's (librdkafka's ``rdk:``)."""
    import threading

    names = {str(t.native_id): t.name.split("[")[0] for t in threading.enumerate()}
    spent: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            ns = int((task / "schedstat").read_text().split()[0])
            name = names.get(task.name) or (task / "comm").read_text().strip()
        except OSError:  # a thread that ended meanwhile
            continue
        spent[name] = spent.get(name, 0.0) + ns / 1e9
    return spent


def _child(mode: str, bootstrap: str, topic: str, path: str, spool: str) -> None:
    """One measurement in this process (imports whichever runtrail is on sys.path)."""
    from runtrail.config import Settings
    from runtrail.publisher import Publisher

    events = [orjson.loads(line) for line in Path(path).read_bytes().splitlines()]
    settings = Settings(bootstrap_servers=bootstrap, events_topic=topic, spool_dir=Path(spool))
    if mode.startswith("bare"):
        _bare_child(mode, settings, events)
        return
    publisher = Publisher(settings, log_rejections=False)
    calls = [(e["type"], e["runId"], e["data"], e["step"], e["sessionId"]) for e in events]
    threads = _thread_cpu()
    started, cpu = time.perf_counter(), time.process_time()
    if mode == "publish":
        for event_type, run, data, step, session in calls:
            publisher.publish(event_type, run, data, step=step, session_id=session)
    else:
        for event in events:
            publisher.submit(event)
    left = publisher.flush(300)
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    threads = {name: s - threads.get(name, 0.0) for name, s in _thread_cpu().items()}
    stats = publisher.stats()
    publisher.close()
    if left or stats.rejected or stats.sent != len(events):
        raise SystemExit(f"not everything was delivered: {left} left, {stats}")
    print(json.dumps({"seconds": elapsed, "cpu": used, "events": len(events), "threads": threads}))


def _per_thread(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median CPU µs an event of each thread over the runs that counted them (the publisher's
    modes: the agent's thread is ``MainThread``)."""
    counted = [r for r in runs if "threads" in r]
    names = {name for r in counted for name in r["threads"]}
    return {
        name: statistics.median(r["threads"].get(name, 0.0) / r["events"] * 1e6 for r in counted)
        for name in names
    }


def _measure(
    root: Path, mode: str, bootstrap: str, partitions: int, path: Path, cpu: int
) -> dict[str, float]:
    topic = create_topic(bootstrap, partitions, prefix="benchpub")
    try:
        with tempfile.TemporaryDirectory() as spool:
            pin = ["taskset", "-c", str(cpu)]
            if mode == "cli":
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                cmd = [sys.executable, "-m", "runtrail_tools.cli.main", "publish", str(path)]
                cmd += ["--topic", topic]
                env = checkout_env(root) | {
                    "RUNTRAIL_BOOTSTRAP_SERVERS": bootstrap,
                    "RUNTRAIL_SPOOL_DIR": spool,
                }
                done = subprocess.run(
                    pin + cmd, env=env, capture_output=True, text=True, check=False
                )
                elapsed = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode != 0:
                    raise SystemExit(f"runtrail publish failed: {done.stderr[-2000:]}")
                events = sum(1 for _ in path.open("rb"))
                used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                return {"seconds": elapsed, "cpu": used, "events": events}
            cmd = [sys.executable, "-m", "bench.publisher_loop", "--child", mode]
            cmd += [bootstrap, topic, str(path), spool]
            done = subprocess.run(pin + cmd, env=checkout_env(root), capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"child failed: {done.stderr[-2000:]}")
            result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
            return result
    finally:
        delete_topic(bootstrap, topic)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:7])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=0, help="the CPU every child is pinned to")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    parser.add_argument(
        "--modes",
        default="publish,submit,cli",
        help="of publish, submit, cli, bare (the bare client producing the same records: "
        "the ceiling) and bare-batch (produce_batch, without headers)",
    )
    parser.add_argument("--bootstrap-servers")
    args = parser.parse_args()

    roots = {"this checkout": HERE}
    if args.baseline is not None:
        roots = {"baseline": args.baseline.resolve(), **roots}
    modes = args.modes.split(",")
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch, broker(args.bootstrap_servers) as bootstrap:
        path = Path(scratch) / "events.jsonl"
        with path.open("wb") as out:
            for event in workload(args.events):
                out.write(orjson.dumps(event) + b"\n")
        for round_no in range(args.rounds):
            for mode in modes:
                for label, root in roots.items():
                    m = _measure(root, mode, bootstrap, args.partitions, path, args.cpu)
                    results.setdefault(f"{mode} | {label}", []).append(m)
                    print(
                        f"round {round_no + 1} {mode:8s} {label:14s} "
                        f"{m['events'] / m['seconds']:>10,.0f} events/s  "
                        f"{m['cpu'] / m['events'] * 1e6:6.1f} µs CPU an event",
                        flush=True,
                    )
    summary: dict[str, Any] = {}
    print(f"\n{'contender':<30} {'events/s (median)':>18} {'µs CPU/event (median)':>22}")
    for name, runs in results.items():
        rate = statistics.median(r["events"] / r["seconds"] for r in runs)
        cpu_us = statistics.median(r["cpu"] / r["events"] * 1e6 for r in runs)
        summary[name] = {"per_second": rate, "cpu_us_per_event": cpu_us, "runs": runs}
        print(f"{name:<30} {rate:>18,.0f} {cpu_us:>22.1f}")
        by_thread = _per_thread(runs)
        for thread, us in sorted(by_thread.items(), key=lambda item: -item[1]):
            if us >= 0.05:
                print(f"  {thread:<28} {'':>18} {us:>22.1f}")
    if args.baseline is not None:
        print()
        for mode in modes:
            old, new = summary[f"{mode} | baseline"], summary[f"{mode} | this checkout"]
            print(
                f"{mode}: {new['per_second'] / old['per_second']:.2f}x the rate, "
                f"{old['cpu_us_per_event'] / new['cpu_us_per_event']:.2f}x less CPU an event"
            )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"publisher_loop-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps({"events": args.events, "cpu": args.cpu, **summary}, indent=2))
    print(f"\nresults written to {out}")


if __name__ == "__main__":
    main()
