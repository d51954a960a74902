"""OpenTelemetry GenAI end to end: a traced agent → the real OTLP/HTTP exporter → ``runtrail run
otlp-ingest`` (its own process) → the real broker → every service, each its own process
(capture, resume-cache, sessions, audit, projector, noop).

Then what each service wrote is held against what the spans said: capture's node records
(prompt messages, model, output text, tokens; the tool's call and result, its secret
argument masked), the resume-cache's entries, the session's events, the audit chain (valid,
one link per event) and the projector's status (succeeded, and failed for a run whose agent
span ended with status ERROR).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from runtrail.adapters.otel import RuntrailSpanExporter
from runtrail.capture.reader import iter_records
from runtrail.config import Settings
from runtrail.publisher import Publisher
from runtrail.runtime.registry import SERVICES
from runtrail_tools.demo.readback import open_readers
from runtrail_tools.demo.targets import DemoSettings, from_stack
from runtrail_tools.devstack.catchup import wait_caught_up
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import DevStack, StackOptions
from runtrail_tools.devstack.state import StackState
from tests.otel_support import SECRET, STEPS, expected_model_nodes, run_agent
from tests.support import stack_settings

pytestmark = [pytest.mark.kafka]
TOKEN = "otlp-e2e-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[DevStack, StackState, Settings]]:
    prefix = f"otlp-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        tmp_path / "state",
        prefix,
        partitions=2,
        spool_dir=tmp_path / "state" / "spool",
    )
    options = StackOptions(
        port_base=find_free_base(SERVICES), manage_broker=False, group_prefix=prefix
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        state = dev.up()
        yield dev, state, settings.model_copy(update={"state_dir": dev.state_dir})
    finally:
        assert dev.down() == []


@pytest.fixture
def ingest(stack: tuple[DevStack, StackState, Settings], tmp_path: Path) -> Iterator[str]:
    """``runtrail run otlp-ingest`` as a user starts it; the URL of its /v1/traces."""
    _, _, settings = stack
    port, metrics = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
    env.update(
        RUNTRAIL_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
        RUNTRAIL_EVENTS_TOPIC=settings.events_topic,
        RUNTRAIL_SPOOL_DIR=str(tmp_path / "ingest-spool"),
        RUNTRAIL_STATE_DIR=str(settings.state_dir),
        RUNTRAIL_OTLP_INGEST_TOKENS=json.dumps({"acme": TOKEN}),
    )
    log = (tmp_path / "ingest.log").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "runtrail_tools.cli.main", "run", "otlp-ingest"),
            *("-o", f"http_port={port}", "--metrics-port", str(metrics)),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "ingest.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "otlp-ingest never became ready"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1/traces"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, (tmp_path / "ingest.log").read_text()
        log.close()


@pytest.mark.parametrize("way", ["otlp-ingest", "exporter"])
def test_a_traced_agent_reaches_every_service_through_otlp_ingest(
    stack: tuple[DevStack, StackState, Settings], way: str, request: pytest.FixtureRequest
) -> None:
    """Both ways in: the OTLP/HTTP exporter posting to otlp-ingest, and the in-process
    ``RuntrailSpanExporter`` on the agent's own Publisher."""
    dev, state, settings = stack
    exporter: SpanExporter
    if way == "otlp-ingest":
        exporter = OTLPSpanExporter(
            request.getfixturevalue("ingest"),
            headers={"Authorization": f"Bearer {TOKEN}"},
            compression=Compression.Gzip,
        )
    else:
        publisher = Publisher(
            settings.model_copy(
                update={"tenant": "acme", "spool_dir": settings.state_dir / "exporter-spool"}
            )
        )
        request.addfinalizer(publisher.close)
        exporter = RuntrailSpanExporter(publisher)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    good = run_agent(provider, conversation=conversation)
    failed = run_agent(provider, fail=True, conversation=conversation + "-b")
    assert provider.force_flush(30_000)
    provider.shutdown()
    if way == "exporter":
        assert publisher.flush(30.0) == 0 and exporter.failures == 0

    groups = {name: f"{dev.options.group_prefix}.{name}" for name in SERVICES}
    # a bound, not a pace: the loop ends as soon as audit holds both runs whole; a full CI run
    # on 2 cores once took longer than 60 s for exporter -> ingest -> broker -> services
    deadline = time.monotonic() + 150
    while True:  # the receiver publishes asynchronously: wait until the topic has both runs
        targets = from_stack(state, settings, DemoSettings())
        with open_readers(targets) as readers:
            sealed = [readers.audit("acme", run) for run in (good, failed)]
            if all(a and a.links == 11 for a in sealed) or time.monotonic() > deadline:
                break
        time.sleep(0.5)
    # only now does the topic hold every event, so only now are its ends the ones every
    # service must reach (a catch-up measured earlier, against the ends of a topic the
    # receiver was still filling, once let the projector be read before it got there)
    lags = wait_caught_up(settings, groups, settings.events_topic, timeout=120)
    assert all(lag == 0 for lag in lags.values()), lags

    targets = from_stack(state, settings, DemoSettings())
    with open_readers(targets) as readers:
        # --- capture: the node records are what the spans said -------------------------------
        records = sorted(
            iter_records(readers.capture_url(), good, None, "acme"),
            key=lambda r: (r.step or 0, r.node_type),
        )
        models = [r for r in records if r.node_type == "MODEL"]
        tools = [r for r in records if r.node_type == "TOOL"]
        assert len(models) == 2 and len(tools) == 1, [r.node_type for r in records]
        for record, want in zip(models, expected_model_nodes(), strict=True):
            assert record.step == want["step"] and not record.incomplete
            assert record.session_id == conversation
            assert record.inputs["model"] == "gpt-test"  # type: ignore[index]
            assert record.inputs["messages"] == want["messages"]  # type: ignore[index]
            assert record.output_text == want["text"]
            assert (record.input_tokens, record.output_tokens) == want["tokens"]
            assert record.outputs["outputMessages"] == want["outputMessages"]  # type: ignore[index]
        (tool,) = tools
        call_id, name, arguments, result = STEPS[0]["tool"]
        assert tool.step == 1 and tool.turn_id == models[0].turn_id
        assert tool.inputs["callId"] == call_id and tool.inputs["toolName"] == name  # type: ignore[index]
        assert tool.inputs["arguments"]["city"] == arguments["city"]  # type: ignore[index]
        # the tool returned text that reads as JSON: the record keeps that text
        assert tool.outputs["output"] == json.dumps(result)  # type: ignore[index]
        everything = json.dumps([r.model_dump(mode="json") for r in records])
        assert SECRET not in everything  # redacted before it left the receiver

        # --- resume-cache, sessions, audit, projector ----------------------------------------
        cache = readers.cache("acme", good)
        assert cache is not None and (cache.model_entries, cache.tool_entries) == (2, 1)
        session = readers.session("acme", conversation)
        assert session is not None and session.events > 0
        for run in (good, failed):
            audit = readers.audit("acme", run)
            assert audit is not None and audit.valid and audit.links == 11, audit
        projected = readers.projection("acme", good)
        assert projected is not None and projected.status == "succeeded", projected
        assert (projected.model_nodes, projected.tool_nodes) == (2, 1)
        failed_view = readers.projection("acme", failed)
        assert failed_view is not None and failed_view.status == "failed", failed_view
