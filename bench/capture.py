"""Benchmark of the capture service: events/s into the file sink, beside the raw consume rate.

    python -m bench.capture --events 1000000

Fills a fresh topic with the realistic workload (:mod:`bench.workload`) through the publisher,
then reads it back with a bare librdkafka consumer (poll and discard: the baseline), with the
``noop`` service (the runtime's own cost; ``--skip-noop`` leaves it out) and with the
``capture`` service writing JSONL into a temporary folder — fsynced before every commit, as
in production. Every rate is printed with its ratio to the baseline of the same run. Runs that
are still open when the workload stops hold their last step, so records < nodes published.
``--profile`` writes a pyinstrument profile of the capture run to bench/results/.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from bench.harness import RESULTS, Rate, broker, create_topic, delete_topic, raw_consume, report
from bench.runtime import publish
from bench.workload import workload
from runtrail.capture import read_records
from runtrail.config import Settings
from runtrail.runtime.runner import ServiceFactory, ServiceRunner
from runtrail_services.capture.service import CaptureService
from runtrail_services.noop.service import NoopService


def run_service(
    factory: ServiceFactory,
    name: str,
    settings: Settings,
    expected: int,
    options: dict[str, str] | None = None,
    profile: bool = False,
) -> tuple[Rate, CollectorRegistry]:
    """Run a service on this thread until it processed ``expected`` events; its rate.

    Timed from the first consumed message to the last processed one, as in bench.runtime.
    """
    registry = CollectorRegistry()
    group = f"bench-{name}-{settings.events_topic}"
    runner = ServiceRunner(
        factory,
        settings.model_copy(update={"group": group}),
        service_name=name,
        options=options,
        metrics_port=0,
        registry=registry,
    )
    labels = {"service": name}
    marks: dict[str, float] = {}

    def watch() -> None:
        while True:
            if "first" not in marks and registry.get_sample_value(
                "runtrail_consumed_total", labels
            ):
                marks["first"] = time.perf_counter()
            processed = registry.get_sample_value("runtrail_processed_total", labels) or 0
            if processed >= expected:
                marks["last"] = time.perf_counter()
                marks["processed"] = processed
                runner.request_stop()
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    if profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001)
        with profiler:
            runner.run()
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{name}-profile.txt"
        path.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        print(f"  profile written to {path}")
    else:
        runner.run()
    watcher.join(10)
    rate = Rate(
        f"{name} service through the runtime" + (" (JSONL, fsync)" if name == "capture" else ""),
        int(marks["processed"]),
        marks["last"] - marks["first"],
    )
    return rate, registry


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--skip-noop", action="store_true", help="do not run the noop service")
    parser.add_argument("--profile", action="store_true", help="profile the capture run")
    parser.add_argument("--keep", action="store_true", help="keep the capture files")
    args = parser.parse_args()

    print(f"generating {args.events:,} events …", flush=True)
    events = list(workload(args.events))
    sink_dir = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    extra: dict[str, object] = {"events": args.events, "partitions": args.partitions}
    with broker(args.bootstrap_servers) as bootstrap:
        topic = create_topic(bootstrap, args.partitions)
        settings = Settings(
            bootstrap_servers=bootstrap,
            events_topic=topic,
            dlq_topic=f"{topic}.dlq",
            spool_dir=RESULTS / "spool",
        )
        try:
            print("publishing …", flush=True)
            published = publish(settings, events)
            del events
            print("raw consume …", flush=True)
            raw = raw_consume(bootstrap, topic, args.events)
            rates = [raw]
            if not args.skip_noop:
                print("noop service …", flush=True)
                rates.append(run_service(NoopService, "noop", settings, args.events)[0])
            print(f"capture service into {sink_dir} …", flush=True)
            options = {"sink_url": sink_dir.as_uri(), "idle_flush_s": "3600"}
            captured, registry = run_service(
                CaptureService, "capture", settings, args.events, options, args.profile
            )
            rates += [captured, published]
        finally:
            delete_topic(bootstrap, topic)
    extra.update(capture_figures(registry, sink_dir))
    for key, value in extra.items():
        print(f"  {key}: {value}")
    if args.keep:
        print(f"capture files kept in {sink_dir}")
    else:
        shutil.rmtree(sink_dir, ignore_errors=True)
    report("capture benchmark", rates, raw, extra)


def capture_figures(registry: CollectorRegistry, sink_dir: Path) -> dict[str, object]:
    """What the capture run wrote, as counted by its metrics and as read back from disk."""
    labels = {"service": "capture"}

    def value(name: str, **more: str) -> float:
        return registry.get_sample_value(name, {**labels, **more}) or 0.0

    flushes = value("runtrail_capture_sink_flush_seconds_count")
    files = list(sink_dir.rglob("capture-*.jsonl"))
    return {
        "records_model": int(value("runtrail_capture_records_total", node_type="MODEL")),
        "records_tool": int(value("runtrail_capture_records_total", node_type="TOOL")),
        "records_read_back": len(read_records(sink_dir.as_uri())),
        "sink_files": len(files),
        "sink_bytes": sum(f.stat().st_size for f in files),
        "sink_flushes": int(flushes),
        "sink_flush_mean_ms": round(
            1000 * value("runtrail_capture_sink_flush_seconds_sum") / flushes, 2
        )
        if flushes
        else 0.0,
    }


if __name__ == "__main__":
    main()
