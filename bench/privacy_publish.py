"""Publishing with every content class by reference against publishing inline, in one run.

    python -m bench.privacy_publish --events 20000 --rounds 3

Both contenders are ``bench.publisher_loop``'s ``submit`` child (``Publisher.submit`` of the
realistic workload, every event acknowledged before the clock stops), pinned to one CPU, in
alternating rounds; the by-reference one runs with a ``file://`` content store and the policy
``{"byReference": "all"}`` (one sealed object written per content field). Reported: events/s
(wall) and CPU µs per event, medians, and the by-reference / inline ratio of CPU per event.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from bench.checkout import HERE, checkout_env
from bench.harness import RESULTS, broker, create_topic, delete_topic
from bench.workload import workload


def _measure(mode: str, bootstrap: str, path: Path, cpu: int, scratch: Path) -> dict[str, float]:
    topic = create_topic(bootstrap, 6, prefix="benchprivacy")
    try:
        with tempfile.TemporaryDirectory(dir=scratch) as work:
            env = checkout_env(HERE)
            if mode == "by-reference":
                env["RUNTRAIL_CONTENT_STORE_URL"] = Path(work, "content").as_uri()
                env["RUNTRAIL_KEY_STORE_URL"] = Path(work, "keys").as_uri()
                env["RUNTRAIL_PRIVACY_POLICY"] = json.dumps({"byReference": "all"})
            cmd = ["taskset", "-c", str(cpu), sys.executable, "-m", "bench.publisher_loop"]
            cmd += ["--child", "submit", bootstrap, topic, str(path), str(Path(work, "spool"))]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{mode} child failed: {done.stderr[-2000:]}")
            result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
            return result
    finally:
        delete_topic(bootstrap, topic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=0)
    parser.add_argument("--bootstrap-servers")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"inline": [], "by-reference": []}
    with tempfile.TemporaryDirectory() as scratch, broker(args.bootstrap_servers) as bootstrap:
        path = Path(scratch) / "events.jsonl"
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in workload(args.events)))
        for round_no in range(args.rounds):
            for mode in runs:
                m = _measure(mode, bootstrap, path, args.cpu, Path(scratch))
                runs[mode].append(m)
                print(
                    f"round {round_no + 1} {mode:12s} {m['events'] / m['seconds']:>9,.0f} "
                    f"events/s  {m['cpu'] / m['events'] * 1e6:7.1f} µs CPU an event",
                    flush=True,
                )
    summary = {
        mode: {
            "events_per_s": statistics.median(r["events"] / r["seconds"] for r in found),
            "cpu_us_per_event": statistics.median(r["cpu"] / r["events"] * 1e6 for r in found),
        }
        for mode, found in runs.items()
    }
    ratio = summary["by-reference"]["cpu_us_per_event"] / summary["inline"]["cpu_us_per_event"]
    summary["ratio_cpu_by_reference_to_inline"] = {"value": round(ratio, 2)}
    print(json.dumps(summary, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "privacy_publish.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
