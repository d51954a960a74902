"""Overhead of the OpenTelemetry GenAI adapter per span, against the same traced agent without it.

    python -m bench.adapter_otel --runs 300 [--bootstrap host:port]

The agent is the tests' GenAI-instrumented run (``tests/otel_support.py``: one invoke_agent,
two chat, one execute_tool and one HTTP span; 11 events). It runs ``--runs`` times, each way
after a warm-up, every span exported synchronously (``SimpleSpanProcessor``) so all the cost is
counted (CPU of all threads, so the publisher's and the receiver's threads count too;
``--batch``: behind a ``BatchSpanProcessor`` instead, the usual set-up, flushed at the end):

* **bare** — traced, spans handed to an exporter that discards them: the baseline;
* **exporter, discarding sink** — ``RuntrailSpanExporter`` mapping spans to events that go
  nowhere: the mapping's own cost;
* **exporter + Publisher** — the in-process exporter publishing through a real
  :class:`Publisher` to a fresh topic (validated, redacted, encoded, produced);
* **OTLP/HTTP → otlp-ingest** — the real protobuf OTLP exporter posting each span to an
  in-process receiver, which publishes to the broker: the out-of-process path, all in one
  process so its CPU is counted.

Reported per way: CPU seconds, spans, the overhead per span ((way - bare) / spans) and the
ratio way / bare.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from bench.harness import broker, create_topic, delete_topic
from runtrail.adapters.otel import RuntrailSpanExporter
from runtrail.config import Settings
from runtrail.publisher import Publisher
from tests.otel_support import run_agent

SPANS_PER_RUN = 5


class Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class DiscardingSink:
    """Takes events and forgets them (the mapping's cost alone)."""

    class _Taken:
        event_id = "e"
        reason = None

    def submit(self, event: Any, *, trace_context: Any = None) -> Any:
        return self._Taken()

    def flush(self, timeout: float = 0.0) -> int:
        return 0

    def forget_run(self, run_id: str) -> None:
        pass


BATCH = False


def timed(exporter: SpanExporter, runs: int) -> float:
    provider = TracerProvider()
    processor = BatchSpanProcessor(exporter) if BATCH else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    for _ in range(max(10, runs // 10)):
        run_agent(provider)
    provider.force_flush()
    started = time.process_time()
    for _ in range(runs):
        run_agent(provider)
    provider.force_flush()
    spent = time.process_time() - started
    provider.shutdown()
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap",
        help="a running broker (else one is started)",
    )
    parser.add_argument(
        "--batch", action="store_true", help="BatchSpanProcessor (the usual set-up) instead"
    )
    args = parser.parse_args(argv)
    global BATCH
    BATCH = args.batch
    results: dict[str, float] = {}
    with broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        topic = create_topic(bootstrap, 3, prefix="bench-otel")
        settings = Settings(
            bootstrap_servers=bootstrap, events_topic=topic, spool_dir=Path(tmp) / "spool"
        )
        ways: dict[str, Callable[[], float]] = {
            "bare": lambda: timed(Discard(), args.runs),
            "exporter, discarding sink": lambda: timed(
                RuntrailSpanExporter(DiscardingSink()), args.runs
            ),
        }

        def with_publisher() -> float:
            with Publisher(settings) as publisher:
                spent = timed(RuntrailSpanExporter(publisher), args.runs)
                started = time.process_time()
                publisher.flush(60)
                return spent + time.process_time() - started

        def through_ingest() -> float:
            from runtrail_services.otlp_ingest.service import OtlpIngestReceiver

            options = {"http_port": "0", "tokens": json.dumps({"bench": "bench-token"})}
            receiver = OtlpIngestReceiver(settings, options=options, metrics_port=0)
            thread = threading.Thread(target=receiver.run, daemon=True)
            thread.start()
            while not receiver.health.ready:
                time.sleep(0.05)
            exporter = OTLPSpanExporter(
                f"http://127.0.0.1:{receiver.port}/v1/traces",
                headers={"Authorization": "Bearer bench-token"},
            )
            try:
                spent = timed(exporter, args.runs)
                started = time.process_time()
                receiver.publisher.flush(60)
                return spent + time.process_time() - started
            finally:
                receiver.request_stop()
                thread.join(30)

        ways["exporter + Publisher"] = with_publisher
        ways["OTLP/HTTP -> otlp-ingest"] = through_ingest
        try:
            for name, way in ways.items():
                results[name] = way()
        finally:
            delete_topic(bootstrap, topic)
    spans = args.runs * SPANS_PER_RUN
    bare = results["bare"]
    mode = "BatchSpanProcessor" if args.batch else "SimpleSpanProcessor"
    print(f"{args.runs} runs, {spans} spans each way, {mode} (CPU seconds, all threads)")
    print(f"{'way':30} {'cpu s':>8} {'µs/span over bare':>18} {'ratio':>7}")
    for name, spent in results.items():
        over = (spent - bare) / spans * 1e6
        print(f"{name:30} {spent:8.3f} {over:18.1f} {spent / bare:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
