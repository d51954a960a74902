"""The publish call step by step, without Kafka: CPU µs an event for each of the pipeline's
steps (``envelope``, ``prepare``, ``validate``, ``encode``), for this checkout and optionally
another, interleaved.

    python -m bench.publish_stages --events 30000 --rounds 3 [--baseline /path/to/checkout]

Each measurement runs in a fresh child (imports whichever runtrail is under the root given),
best of three passes over the :mod:`bench.workload` stream; the medians of the rounds are
printed. What the call costs beyond these steps (numbering, routing, the producer) and the
publisher's threads are in ``bench.publisher_loop``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.checkout import HERE, checkout_env

STEPS = ("envelope", "prepare", "validate", "encode")


def _child(events: int) -> None:
    from bench.workload import workload
    from runtrail.events import EventCodec
    from runtrail.events.limits import EventLimits
    from runtrail.publisher.pipeline import encode, envelope, prepare, validate
    from runtrail.publisher.redaction import default_redactor

    codec, limits = EventCodec(), EventLimits()
    calls = [
        (e["type"], e["runId"], e["data"], e["step"], e["sessionId"]) for e in workload(events)
    ]
    gc.collect()
    gc.freeze()
    clock = time.thread_time
    best: dict[str, float] = {}
    for _ in range(3):
        spent = dict.fromkeys(STEPS, 0.0)
        for event_type, run, data, step, session in calls:
            a = clock()
            form = envelope(event_type, run, data, tenant_id="bench", session_id=session, step=step)
            b = clock()
            prepared = prepare(form, limits, "bench", default_redactor)
            c = clock()
            valid = validate(prepared)
            d = clock()
            encode(codec, limits, valid, 1, None)
            e = clock()
            spent["envelope"] += b - a
            spent["prepare"] += c - b
            spent["validate"] += d - c
            spent["encode"] += e - d
        for step, seconds in spent.items():
            best[step] = min(best.get(step, seconds), seconds)
    print(json.dumps({step: seconds / len(calls) * 1e6 for step, seconds in best.items()}))


def _measure(root: Path, events: int) -> dict[str, float]:
    env = checkout_env(root)
    cmd = [sys.executable, "-m", "bench.publish_stages", "--child", str(events)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child failed: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    args = parser.parse_args()
    roots = {"this checkout": HERE}
    if args.baseline is not None:
        roots = {"baseline": args.baseline.resolve(), **roots}
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in roots}
    for round_no in range(args.rounds):
        for label, root in roots.items():
            step_us = _measure(root, args.events)
            runs[label].append(step_us)
            parts = "  ".join(f"{s} {step_us[s]:.2f}" for s in STEPS)
            print(f"round {round_no + 1} {label:14s} {parts}  all {sum(step_us.values()):.2f}")
    print(f"\n| contender | {' | '.join(STEPS)} | all four |")
    print(f"|---|{'---|' * (len(STEPS) + 1)}")
    for label, measured in runs.items():
        medians = [statistics.median(m[s] for m in measured) for s in STEPS]
        cells = " | ".join(f"{v:.2f}" for v in medians)
        print(f"| {label} | {cells} | {sum(medians):.2f} |")
    print("\nCPU µs an event, medians of the rounds (each the best of three passes)")


if __name__ == "__main__":
    main()
