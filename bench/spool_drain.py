"""How fast a publisher sends a spool back to the topic: an agent restarted after an outage.

    python -m bench.spool_drain --events 20000 --rounds 3 [--baseline /path/to/checkout]

An agent's publisher spools every accepted event; what the broker never acknowledged stays in
the spool folder for the next publisher on it. Each measurement, in a fresh child process:
a publisher whose broker is unreachable accepts ``--events`` workload events and closes (all
of them stay in its spool), then a publisher on the same folder with the real broker sends
them; timed from its start until the spool is drained and every event acknowledged. Beside it,
the same events published directly by a fresh publisher (the rate a drain could reach). With
``--baseline``, another checkout's library is measured in the same run, rounds interleaved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.checkout import HERE, checkout_env
from bench.harness import broker, create_topic, delete_topic

MODES = ("drain", "direct")


def _child(mode: str, bootstrap: str, topic: str, events: int, spool: str) -> dict[str, float]:
    from prometheus_client import CollectorRegistry

    from bench.workload import workload
    from runtrail.config import Settings
    from runtrail.publisher import Publisher

    forms = list(workload(events))

    def publisher(servers: str) -> Publisher:
        settings = Settings(bootstrap_servers=servers, events_topic=topic, spool_dir=Path(spool))
        return Publisher(settings, registry=CollectorRegistry(), log_rejections=False)

    def publish_all(target: Publisher) -> None:
        for e in forms:
            target.publish(
                e["type"], e["runId"], e["data"], step=e["step"], session_id=e["sessionId"]
            )

    if mode == "drain":
        away = publisher("127.0.0.1:1")  # no broker there: everything stays in the spool
        publish_all(away)
        away.close(timeout=0.5)
        started = time.perf_counter()
        back = publisher(bootstrap)
        drained = back.drain(600)
    else:
        started = time.perf_counter()
        back = publisher(bootstrap)
        publish_all(back)
        drained = back.flush(600) == 0
    seconds = time.perf_counter() - started
    stats = back.stats()
    back.close()
    if not drained or stats.sent != events:
        raise SystemExit(f"{mode}: not everything was sent: {stats}")
    return {"seconds": seconds}


def _measure(root: Path, mode: str, bootstrap: str, events: int) -> float:
    """Events/s of one measurement in a child process importing the library under ``root``."""
    env = checkout_env(root)
    topic = create_topic(bootstrap, 3, prefix="bench-drain")
    try:
        with tempfile.TemporaryDirectory() as spool:
            cmd = [sys.executable, "-m", "bench.spool_drain", "--child", mode, bootstrap, topic]
            cmd += [str(events), spool]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"child failed: {done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        delete_topic(bootstrap, topic)
    return events / float(result["seconds"])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, bootstrap, topic, events, spool = sys.argv[2:7]
        print(json.dumps(_child(mode, bootstrap, topic, int(events), spool)), flush=True)
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--bootstrap-servers")
    args = parser.parse_args()
    roots = {"this checkout": HERE}
    if args.baseline is not None:
        roots = {"baseline": args.baseline.resolve(), **roots}
    rates: dict[tuple[str, str], list[float]] = {}
    with broker(args.bootstrap_servers) as bootstrap:
        for n in range(1, args.rounds + 1):
            for label, root in roots.items():
                for mode in MODES:
                    rate = _measure(root, mode, bootstrap, args.events)
                    rates.setdefault((label, mode), []).append(rate)
                    print(f"round {n} {label:14} {mode:7} {rate:10,.0f} events/s", flush=True)
    print("\n| library | spool drained (events/s) | published directly (events/s) | drain/direct |")
    print("|---|---|---|---|")
    for label in roots:
        drain = statistics.median(rates[(label, "drain")])
        direct = statistics.median(rates[(label, "direct")])
        print(f"| {label} | {drain:,.0f} | {direct:,.0f} | {drain / direct:.2f} |")
    print(f"\nmedians of {args.rounds} interleaved rounds, {args.events:,} events each")


if __name__ == "__main__":
    main()
