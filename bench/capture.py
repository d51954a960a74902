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
from pathlib import Path

from prometheus_client import CollectorRegistry

from bench.harness import (
    RESULTS,
    broker,
    create_topic,
    delete_topic,
    raw_consume,
    report,
    run_service,
)
from bench.runtime import publish
from bench.workload import workload
from runtrail.capture import read_records
from runtrail.config import Settings
from runtrail_services.capture.service import CaptureService
from runtrail_services.noop.service import NoopService


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
                rates.append(run_service(NoopService, "noop", settings, args.events).rate)
            print(f"capture service into {sink_dir} …", flush=True)
            options = {"sink_url": sink_dir.as_uri(), "idle_flush_s": "3600"}
            run = run_service(
                CaptureService,
                "capture",
                settings,
                args.events,
                label="capture service through the runtime (JSONL, fsync)",
                options=options,
                profile=args.profile,
            )
            captured, registry = run.rate, run.registry
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
