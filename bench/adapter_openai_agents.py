"""Overhead of the OpenAI Agents SDK adapter: the same agent with and without the processor.

    python -m bench.adapter_openai_agents [--runs 200] [--steps 3] [--rounds 5]
                                          [--latency-ms 0] [--bootstrap-servers HOST:PORT]

The agent is a real ``Agent`` run by ``Runner.run`` against a scripted ``Model`` (no network)
that calls a function tool ``--steps`` times, then answers. Rounds alternate bare and with the
processor installed (publishing through a real Publisher to a real broker), so a loaded
machine weighs on both alike; the best round of each is reported. Printed: the agent's wall
time per run both ways, their ratio, the overhead per published event, and how long the
worker then took to hand the queue to the broker (the agent does not wait for that).
``--latency-ms`` makes each model call wait that long (an await, as a network call does): the
worker then publishes while the agent waits, which is the usual case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from agents import Agent, Runner
from agents.tracing import Span, Trace, TracingProcessor, set_trace_processors
from prometheus_client import CollectorRegistry

from bench.harness import RESULTS, broker, create_topic, delete_topic
from runtrail.adapters.openai_agents import RuntrailTracingProcessor
from runtrail.config import Settings
from runtrail.publisher import Publisher
from tests.openai_agents_support import ScriptedModel, add, call, say


class SlowModel(ScriptedModel):
    """The scripted model, answering after ``latency`` seconds (awaited, like network I/O)."""

    latency = 0.0

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.latency:
            await asyncio.sleep(self.latency)
        return await super().get_response(*args, **kwargs)


def agent(steps: int, latency: float) -> Agent[Any]:
    answers: list[Any] = [[call("add", {"a": i, "b": 1}, f"c-{i}")] for i in range(steps)]
    answers.append([say("done")])
    model = SlowModel(answers)
    model.latency = latency
    return Agent(name="bench", instructions="add", model=model, tools=[add])


async def runs(count: int, steps: int, latency: float = 0.0) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await Runner.run(agent(steps, latency), "go", max_turns=steps + 2)
    return time.perf_counter() - started


class Recorder(TracingProcessor):
    """Keeps every callback, to replay them into a processor with no agent running."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.calls.append(("on_trace_start", trace))

    def on_trace_end(self, trace: Trace) -> None:
        self.calls.append(("on_trace_end", trace))

    def on_span_start(self, span: Span[Any]) -> None:
        self.calls.append(("on_span_start", span))

    def on_span_end(self, span: Span[Any]) -> None:
        self.calls.append(("on_span_end", span))

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


def worker_cpu(publisher: Publisher, count: int, steps: int) -> float:
    """CPU seconds per event of mapping and publishing alone (the callbacks replayed)."""
    recorder = Recorder()
    set_trace_processors([recorder])
    asyncio.run(runs(count, steps))
    set_trace_processors([])
    processor = RuntrailTracingProcessor(
        publisher, registry=CollectorRegistry(), max_queue=len(recorder.calls) + 1
    )
    started = time.process_time()
    for name, obj in recorder.calls:
        getattr(processor, name)(obj)
    processor.force_flush(timeout=120.0)
    cpu = time.process_time() - started
    processor.shutdown()
    return cpu / max(1, processor.published)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--bootstrap-servers")
    args = parser.parse_args(argv)
    events_per_run = 2 + 5 * args.steps + 3 + 1  # lifecycle, per tool step, last step, end
    latency = args.latency_ms / 1000.0

    with broker(args.bootstrap_servers) as bootstrap, tempfile.TemporaryDirectory() as spool:
        topic = create_topic(bootstrap, 3, prefix="bench-oaa")
        settings = Settings(bootstrap_servers=bootstrap, events_topic=topic, spool_dir=Path(spool))
        publisher = Publisher(settings, registry=CollectorRegistry())
        processor = RuntrailTracingProcessor(publisher, registry=CollectorRegistry())
        bare: list[float] = []
        traced: list[float] = []
        drains: list[float] = []
        try:
            set_trace_processors([])
            asyncio.run(runs(5, args.steps))  # warm up the SDK
            for _ in range(args.rounds):
                set_trace_processors([])
                bare.append(asyncio.run(runs(args.runs, args.steps, latency)))
                set_trace_processors([processor])
                traced.append(asyncio.run(runs(args.runs, args.steps, latency)))
                started = time.perf_counter()
                processor.force_flush(timeout=120.0)
                drains.append(time.perf_counter() - started)
            set_trace_processors([])
            processor.shutdown()
            cpu_per_event = worker_cpu(publisher, args.runs, args.steps)
        finally:
            publisher.close()
            delete_topic(bootstrap, topic)

    events = args.runs * events_per_run
    best_bare, best_traced = min(bare), min(traced)
    result = {
        "runs": args.runs,
        "steps": args.steps,
        "latency_ms": args.latency_ms,
        "events_per_run": events_per_run,
        "published": processor.published,
        "dropped": processor.dropped,
        "bare_ms_per_run": 1000 * best_bare / args.runs,
        "traced_ms_per_run": 1000 * best_traced / args.runs,
        "ratio": best_traced / best_bare,
        "overhead_us_per_event": 1e6 * (best_traced - best_bare) / events,
        "drain_after_s": min(drains),
        "worker_cpu_us_per_event": 1e6 * cpu_per_event,
    }
    print(f"\nOpenAI Agents SDK adapter: {args.runs} runs x {events_per_run} events, "
          f"model latency {args.latency_ms} ms, best of {args.rounds} rounds")  # fmt: skip
    print(f"  agent without the processor  {result['bare_ms_per_run']:8.3f} ms/run")
    print(f"  agent with the processor     {result['traced_ms_per_run']:8.3f} ms/run")
    print(f"  ratio                        {result['ratio']:8.3f}")
    print(f"  overhead per event           {result['overhead_us_per_event']:8.1f} µs")
    print(f"  worker drained the rest in   {result['drain_after_s']:8.3f} s after the agent")
    print(f"  worker CPU per event         {result['worker_cpu_us_per_event']:8.1f} µs "
          "(mapping + Publisher, replayed without the agent)")  # fmt: skip
    print(f"  published {processor.published}, dropped {processor.dropped}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"adapter_openai_agents-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
