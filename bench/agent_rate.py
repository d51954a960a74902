"""What the publisher costs an agent at an agent's pace: CPU per event at 10, 100 and 1,000
events/s, through ``Publisher.publish`` and through the LangChain callback handler.

    python -m bench.agent_rate --rates 10,100,1000 --seconds 10

A tight loop hides per-event costs that do not scale with the rate (a thread waking up, a
group commit with its fsync, a produce request of one event): at 10 events/s each of those is
paid by one event. So each measurement paces the agent, as a real one is paced by its model:

* **publish** — ``Publisher.publish`` of workload events, one every 1/rate seconds;
* **handler** — a LangGraph ReAct agent (:mod:`bench.adapters`) with the
  ``RuntrailCallbackHandler`` over a real :class:`Publisher`, its invocations spaced so the
  handler emits ``rate`` events a second;

and beside each, the same paced loop without runtrail (``publish``: the loop alone;
``handler``: the agent without callbacks). The figure is the difference in CPU per event,
counted over every thread of the process (``/proc/self/task/*/schedstat``, nanoseconds), so the
publisher's threads and librdkafka's count: what runtrail adds to the agent. Each
measurement runs in a fresh process, after a warm-up; every event is acknowledged before the
clock stops. The per-thread breakdown shows where the added CPU goes.

``--floor`` measures what any code costs at these paces on this machine, without Kafka and
without threads: the publish call's pipeline (envelope, prepare, validate, encode) and, as a
reference that is not runtrail's, the standard library's JSON round trip of the same event,
each timed alone (``time.thread_time_ns``) back to back and then once every 1/rate seconds.
The ratio of the two figures is the machine's: caches that went cold in the pause.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.checkout import checkout_env
from bench.harness import broker, create_topic, delete_topic

MODES = ("publish", "handler")


def thread_cpu_ns() -> Counter[str]:
    """CPU nanoseconds of every thread of this process so far, summed by thread name (Python's
    name for a Python thread, the system's for the others: librdkafka's)."""
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    used: Counter[str] = Counter()
    for task in os.scandir("/proc/self/task"):
        try:
            ns = int(Path(task.path, "schedstat").read_text().split()[0])
            name = python_names.get(int(task.name)) or Path(task.path, "comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
        used[name] += ns
    return used


def paced(rate: float, count: int, step: Callable[[int], None]) -> None:
    """``step(i)`` for i in range(count), the i-th at start + i / rate (never catching up in a
    burst: a late step moves the schedule, as an agent waiting on its model would)."""
    interval = 1.0 / rate
    due = time.perf_counter()
    for i in range(count):
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        step(i)
        due = max(due + interval, time.perf_counter() - interval)


def _publish_child(rate: float, seconds: float, bootstrap: str | None, spool: str) -> dict:
    from bench.workload import workload

    count = max(20, int(rate * seconds))
    events = list(workload(count + 20))
    calls = [(e["type"], e["runId"], e["data"], e["step"], e["sessionId"]) for e in events]
    if bootstrap is None:  # the loop alone
        return _measured(rate, count, lambda i: None, lambda: None)
    from runtrail.config import Settings
    from runtrail.publisher import Publisher

    topic = os.environ["BENCH_TOPIC"]
    settings = Settings(bootstrap_servers=bootstrap, events_topic=topic, spool_dir=Path(spool))
    publisher = Publisher(settings, log_rejections=False)

    def publish(i: int) -> None:
        event_type, run, data, step, session = calls[i]
        publisher.publish(event_type, run, data, step=step, session_id=session)

    for i in range(count, count + 20):  # warm-up: connected, codecs and caches built
        publish(i)
    publisher.flush(30)
    result = _measured(rate, count, publish, lambda: publisher.flush(60))
    stats = publisher.stats()
    publisher.close()
    if stats.sent != count + 20 or stats.rejected:
        raise SystemExit(f"not everything was delivered: {stats}")
    return result


def _handler_child(rate: float, seconds: float, bootstrap: str | None, spool: str) -> dict:
    from bench.adapters import Discard, graph
    from runtrail.adapters.langchain import RuntrailCallbackHandler

    app = graph()
    sink = Discard()
    app.invoke(
        {"messages": [("user", "go")]}, config={"callbacks": [RuntrailCallbackHandler(sink)]}
    )
    per_invocation = sink.events  # events the handler emits for one invocation
    invocations = max(3, int(rate * seconds / per_invocation))
    if bootstrap is None:  # the agent without callbacks
        result = _measured(
            rate / per_invocation,
            invocations,
            lambda i: app.invoke({"messages": [("user", "go")]}),
            lambda: None,
        )
        result["events"] = invocations * per_invocation
        return result
    from runtrail.config import Settings
    from runtrail.publisher import Publisher

    topic = os.environ["BENCH_TOPIC"]
    settings = Settings(bootstrap_servers=bootstrap, events_topic=topic, spool_dir=Path(spool))
    publisher = Publisher(settings, log_rejections=False)
    handler = RuntrailCallbackHandler(publisher)

    def invoke(i: int) -> None:
        app.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})

    for i in range(3):
        invoke(i)
    publisher.flush(30)
    before = publisher.stats().sent
    result = _measured(rate / per_invocation, invocations, invoke, lambda: publisher.flush(60))
    stats = publisher.stats()
    publisher.close()
    result["events"] = stats.sent - before
    if stats.rejected or result["events"] != invocations * per_invocation:
        raise SystemExit(f"not everything was delivered: {stats}")
    return result


def _measured(rate: float, count: int, step: Callable[[int], None], settle: Callable) -> dict:
    """CPU of every thread (and wall time) over ``count`` paced steps and ``settle()``."""
    before, started = thread_cpu_ns(), time.perf_counter()
    paced(rate, count, step)
    settle()
    after, elapsed = thread_cpu_ns(), time.perf_counter() - started
    threads = {name: (after[name] - before.get(name, 0)) / 1e9 for name in after}
    return {"events": count, "seconds": elapsed, "cpu": sum(threads.values()), "threads": threads}


def measure(
    mode: str, rate: float, seconds: float, bootstrap: str | None, root: Path | None = None
) -> dict:
    """One measurement in a fresh process (``bootstrap`` None: without runtrail), with the
    library of the checkout at ``root`` (None: this one)."""
    env = dict(os.environ) if root is None else checkout_env(root)
    topic = None
    if bootstrap is not None:
        topic = create_topic(bootstrap, 3, prefix="bench-agent")
        env["BENCH_TOPIC"] = topic
    try:
        with tempfile.TemporaryDirectory() as spool:
            cmd = [sys.executable, "-m", "bench.agent_rate", "--child", mode, str(rate)]
            cmd += [str(seconds), bootstrap or "-", spool]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"child failed: {done.stderr[-3000:]}")
            result: dict = json.loads(done.stdout.strip().splitlines()[-1])
            return result
    finally:
        if topic is not None:
            delete_topic(bootstrap or "", topic)


def floor(rates: list[float], calls: int = 60) -> list[tuple[str, str, float]]:
    """Median CPU µs of one call of the publish pipeline and of the stdlib reference, back to
    back (rate ``"tight"``) and paced at each rate; rows (what, rate, µs)."""
    import json as stdlib_json

    from bench.workload import workload
    from runtrail.config import Settings
    from runtrail.events import EventCodec
    from runtrail.events.limits import EventLimits
    from runtrail.publisher.pipeline import encode, envelope, prepare, validate
    from runtrail.publisher.redaction import default_redactor

    codec, limits = EventCodec(), EventLimits.from_settings(Settings())
    events = list(workload(calls * (len(rates) + 2)))

    def pipeline(event: dict) -> None:
        form = envelope(
            event["type"],
            event["runId"],
            event["data"],
            tenant_id="default",
            session_id=event["sessionId"],
            step=event["step"],
        )
        encode(codec, limits, validate(prepare(form, limits, "default", default_redactor)), 1, None)

    def reference(event: dict) -> None:
        stdlib_json.loads(stdlib_json.dumps(event))

    rows = []
    for what, call in (("publish pipeline", pipeline), ("stdlib JSON round trip", reference)):
        for event in events[:calls]:  # warm-up: codecs and caches built
            call(event)
        for n, rate in enumerate([0.0, *rates], start=1):
            spent: list[int] = []
            batch = events[n * calls : (n + 1) * calls]
            pause = 1.0 / rate if rate else 0.0
            for event in batch:
                if pause:
                    time.sleep(pause)
                started = time.thread_time_ns()
                call(event)
                spent.append(time.thread_time_ns() - started)
            rows.append(
                (what, f"{rate:,.0f}/s" if rate else "tight", statistics.median(spent) / 1e3)
            )
    return rows


def _thread_group(name: str) -> str:
    """librdkafka's broker threads carry broker names: one group for them all."""
    if name.startswith("rdk:broker"):
        return "rdk:broker*"
    return name.split("[")[0]  # runtrail-publisher[topic] and runtrail-spool[topic]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, rate, seconds, bootstrap, spool = sys.argv[2:7]
        child = _publish_child if mode == "publish" else _handler_child
        result = child(float(rate), float(seconds), None if bootstrap == "-" else bootstrap, spool)
        print(json.dumps(result), flush=True)
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="10,100,1000", help="events/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="paced time a measurement")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument(
        "--floor", action="store_true", help="only the cold-call floor of this machine (no Kafka)"
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    if args.floor:
        print("| call | pace | CPU µs a call (median) | times tight |")
        print("|---|---|---|---|")
        tight = 0.0
        for what, pace, us in floor(rates):
            tight = us if pace == "tight" else tight
            print(f"| {what} | {pace} | {us:.1f} | {us / tight:.1f} |")
        return
    roots: dict[str, Path | None] = {"this checkout": None}
    if args.baseline is not None:
        roots = {"baseline": args.baseline.resolve(), **roots}
    rows: dict[tuple[str, str, float], list[float]] = {}
    with broker(args.bootstrap_servers) as bootstrap:
        for _ in range(args.rounds):
            for mode in args.modes.split(","):
                for rate in rates:
                    # a short measurement at a high rate is enough; a low rate needs its seconds
                    seconds = max(args.seconds, 200 / rate) if rate < 100 else args.seconds
                    bare = measure(mode, rate, seconds, None)
                    for label, root in roots.items():
                        with_rt = measure(mode, rate, seconds, bootstrap, root)
                        events = with_rt["events"]
                        added = with_rt["cpu"] - bare["cpu"] * events / bare["events"]
                        per_event = added / events * 1e6
                        threads: Counter[str] = Counter()
                        for name, cpu in with_rt["threads"].items():
                            threads[_thread_group(name)] += cpu / events * 1e6
                        rows.setdefault((mode, label, rate), []).append(per_event)
                        top = ", ".join(f"{n} {us:.0f}" for n, us in threads.most_common(5) if us)
                        print(
                            f"{mode:8s} {label:14s} {rate:>7,.0f} ev/s: +{per_event:7.1f} µs "
                            f"CPU/event ({events} events; by thread, µs/event: {top})",
                            flush=True,
                        )
    print("\n| through | library | events/s | runtrail's CPU per event (µs, median) |")
    print("|---|---|---|---|")
    for (mode, label, rate), found in rows.items():
        print(f"| {mode} | {label} | {rate:,.0f} | {statistics.median(found):.1f} |")


if __name__ == "__main__":
    main()
