"""OTLP/HTTP ingest: spans per second per CPU core, runtrail's receiver beside Arize Phoenix's.

    python -m bench.otlp_ingest --traces 500 --rounds 3 [--phoenix PYTHON] [--bootstrap host:port]

Both receivers get the same bytes: OTLP/HTTP protobuf requests of OpenInference spans (the
convention Phoenix reads natively), built once before the rounds. Per trace: an AGENT root, two
LLM spans (input and output messages, a tool call, token counts, invocation parameters) and a
TOOL span, 4 spans, posted 64 spans a request over one keep-alive connection, as a
``BatchSpanProcessor`` sends them.

* **runtrail** — ``runtrail run otlp-ingest`` in its own process, publishing to a fresh topic
  of the broker; done when the topic holds every event the receiver says it published (acked
  by the broker: durable).
* **phoenix** — ``phoenix serve`` (``--phoenix``: the Python of a venv with ``arize-phoenix``,
  the bench extra) in its own process with its SQLite database; done when every span is in its
  ``spans`` table.

Measured per round: the CPU seconds of the receiver's process (user + system, all threads,
from ``/proc``) from the first request until done; spans/s/core = spans / those seconds. The
broker's CPU is not counted (Phoenix's database is in its process, runtrail's broker is not:
the figure says what one receiver core carries). Rounds interleave the two, each in a fresh
process; the medians are reported, with the ratio runtrail / phoenix.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from bench.harness import RESULTS, broker, create_topic, delete_topic
from tests.support import end_offsets

SPANS_PER_TRACE = 4
SPANS_PER_REQUEST = 64
TOKEN = "bench-token-0123456789"


def _kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _span(
    trace: bytes, span: int, parent: int | None, name: str, start: int, attrs: dict[str, Any]
) -> Span:
    return Span(
        trace_id=trace,
        span_id=span.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000_000,
        attributes=[_kv(k, v) for k, v in attrs.items()],
        status=Status(code=Status.STATUS_CODE_OK),
    )


def trace_spans(n: int, at_ns: int) -> list[Span]:
    """One agent run in OpenInference spans: AGENT root, LLM, TOOL, LLM."""
    trace = (0xB0000000_00000000_00000000_00000000 + n).to_bytes(16, "big")
    base = n * 16 + 1
    root, llm1, tool, llm2 = base, base + 1, base + 2, base + 3
    question = f"What is the weather in city number {n}?"
    call_id = f"call_{n}"
    arguments = json.dumps({"city": f"city-{n}"})
    result = json.dumps({"temp_c": n % 30 - 5})
    params = json.dumps({"temperature": 0.2, "max_tokens": 256})
    llm_common = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.provider": "openai",
        "llm.invocation_parameters": params,
        "session.id": f"session-{n % 50}",
    }
    return [
        _span(
            trace,
            root,
            None,
            "weather-agent",
            at_ns,
            {
                "openinference.span.kind": "AGENT",
                "input.value": question,
                "output.value": f"It is {result} there.",
                "session.id": f"session-{n % 50}",
            },
        ),
        _span(
            trace,
            llm1,
            root,
            "ChatCompletion",
            at_ns + 1_000,
            {
                **llm_common,
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "You answer weather questions.",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": question,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": call_id,
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "weather",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": (
                    arguments
                ),
                "llm.token_count.prompt": 42,
                "llm.token_count.completion": 17,
                "llm.token_count.total": 59,
            },
        ),
        _span(
            trace,
            tool,
            root,
            "weather",
            at_ns + 2_000,
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "weather",
                "tool.parameters": arguments,
                "input.value": arguments,
                "input.mime_type": "application/json",
                "output.value": result,
                "tool_call.id": call_id,
            },
        ),
        _span(
            trace,
            llm2,
            root,
            "ChatCompletion",
            at_ns + 3_000,
            {
                **llm_common,
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": question,
                "llm.input_messages.1.message.role": "tool",
                "llm.input_messages.1.message.tool_call_id": call_id,
                "llm.input_messages.1.message.content": result,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": f"It is {result} there.",
                "llm.token_count.prompt": 80,
                "llm.token_count.completion": 12,
                "llm.token_count.total": 92,
            },
        ),
    ]


def requests_of(traces: int) -> list[bytes]:
    """The span set as OTLP/HTTP protobuf bodies, children before their root as SDKs end them."""
    at = time.time_ns()
    spans: list[Span] = []
    for n in range(traces):
        root, *children = trace_spans(n, at + n * 10_000_000)
        spans += [*children, root]
    resource = [_kv("service.name", "weather-agent")]
    bodies = []
    for i in range(0, len(spans), SPANS_PER_REQUEST):
        request = ExportTraceServiceRequest(
            resource_spans=[
                ResourceSpans(
                    resource={"attributes": resource},
                    scope_spans=[ScopeSpans(spans=spans[i : i + SPANS_PER_REQUEST])],
                )
            ]
        )
        bodies.append(request.SerializeToString())
    return bodies


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children, all threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


def settled(pid: int, timeout: float = 60.0) -> float:
    """The process's CPU seconds once it is idle (under 20 ms of CPU in half a second): a
    server's start-up work is not counted against its ingest."""
    deadline = time.monotonic() + timeout
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_seconds(pid)
        if now - last < 0.02:
            return now
        last = now
    return last


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def post_all(port: int, path: str, bodies: list[bytes], headers: dict[str, str]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for body in bodies:
        connection.request(
            "POST",
            path,
            body=body,
            headers={"Content-Type": "application/x-protobuf", **headers},
        )
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"POST {path}: {answer.status}")
    connection.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def round_runtrail(bootstrap: str, bodies: list[bytes], spans: int, work: Path) -> float:
    """One round of runtrail's receiver: its CPU seconds until every event is on the topic."""
    topic = create_topic(bootstrap, partitions=4)
    port, metrics_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "runtrail_tools.cli.main",
        "run",
        "otlp-ingest",
        "--bootstrap-servers",
        bootstrap,
        "--events-topic",
        topic,
        "--metrics-port",
        str(metrics_port),
        "-o",
        f"http_port={port}",
        "-o",
        "tokens=" + json.dumps({"bench": TOKEN}),
    ]
    env = {**os.environ, "RUNTRAIL_SPOOL_DIR": str(work / f"spool-{topic}")}
    env["RUNTRAIL_STATE_DIR"] = str(work / f"state-{topic}")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{metrics_port}/readyz"), 60, "runtrail")
        before = settled(process.pid)
        post_all(port, "/v1/traces", bodies, {"Authorization": f"Bearer {TOKEN}"})
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        published = _metric(metrics, "runtrail_otlp_ingest_events_total")
        recorded = _metric(metrics, 'runtrail_otlp_ingest_spans_total{outcome="recorded"')
        if recorded != spans:
            raise RuntimeError(f"runtrail recorded {recorded:.0f} of {spans} spans")
        wait_until(
            lambda: sum(end_offsets(bootstrap, topic, 4).values()) >= published, 120, "events"
        )
        return cpu_seconds(process.pid) - before
    finally:
        _stop(process)
        delete_topic(bootstrap, topic)


def round_phoenix(python: str, bodies: list[bytes], spans: int, work: Path) -> float:
    """One round of Phoenix's receiver: its CPU seconds until every span is in its database."""
    port, grpc_port = free_port(), free_port()
    folder = Path(tempfile.mkdtemp(dir=work, prefix="phoenix-"))
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(folder),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    process = subprocess.Popen(
        [python, "-m", "phoenix.server.main", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 300, "phoenix")
        database = folder / "phoenix.db"
        before = settled(process.pid)
        post_all(port, "/v1/traces", bodies, {})

        def stored() -> bool:
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
                (count,) = db.execute("SELECT count(*) FROM spans").fetchone()
            return bool(count >= spans)

        wait_until(stored, 300, "phoenix spans")
        return cpu_seconds(process.pid) - before
    finally:
        _stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phoenix", help="the Python of a venv with arize-phoenix")
    parser.add_argument("--bootstrap", help="a broker (else one is started)")
    args = parser.parse_args()
    bodies = requests_of(args.traces)
    spans = args.traces * SPANS_PER_TRACE
    seconds: dict[str, list[float]] = {"runtrail": [], "phoenix": []}
    with broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for n in range(args.rounds):
            seconds["runtrail"].append(round_runtrail(bootstrap, bodies, spans, work))
            if args.phoenix:
                seconds["phoenix"].append(round_phoenix(args.phoenix, bodies, spans, work))
            print(
                f"round {n + 1}: "
                + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seconds.items() if v)
            )
    result: dict[str, Any] = {"spans": spans, "requests": len(bodies), "cpu_seconds": seconds}
    print(f"{spans} spans in {len(bodies)} requests; CPU seconds, median of {args.rounds} rounds:")
    rates = {}
    for name, values in seconds.items():
        if values:
            rates[name] = spans / statistics.median(values)
            print(
                f"  {name:9} {statistics.median(values):7.2f} s  {rates[name]:9,.0f} spans/s/core"
            )
    result["spans_per_s_per_core"] = rates
    if len(rates) == 2:
        result["ratio"] = rates["runtrail"] / rates["phoenix"]
        print(f"  runtrail / phoenix: {result['ratio']:.2f}x")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"otlp_ingest-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
