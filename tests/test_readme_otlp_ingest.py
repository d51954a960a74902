"""The otlp-ingest example, run as written: its shell block, read from docs/ADAPTERS.md, starts `runtrail run otlp-ingest` with the
token it shows, and the real OTLP/HTTP exporter, configured only by the block's `export`
lines (endpoint and `Authorization` header from the environment), posts a traced agent run
that lands on the topic under the token's tenant.

Only what a shared test machine needs is added: the broker, a topic, state folders, and free
ports instead of 4318/9460 (the endpoint's port is rewritten to match).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from runtrail.events import EventCodec
from tests import readme_blocks as blocks
from tests.otel_support import run_agent
from tests.support import consume_all, create_topic, unique_topic, wait_for
from tests.test_otlp_ingest import EXPECTED_TYPES

pytestmark = [pytest.mark.kafka]

README = blocks.README
MARKER = "<!-- tested as written by tests/test_readme_otlp_ingest.py -->"


def readme_block() -> list[list[str]]:
    """The block's lines, split as the shell would (comments dropped)."""
    block = blocks.readme_block(MARKER, "bash", what="otlp-ingest example")
    return [shlex.split(line, comments=True) for line in block.splitlines() if line]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1)
    except urllib.error.HTTPError:
        return True  # it answered (405/401: no GET, no token)
    except OSError:
        return False
    return True


def test_the_readme_otlp_ingest_example_runs_as_written(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start, *exports = readme_block()
    assignments = [w for w in start if re.match(r"^[A-Z_]+=", w)]
    command = start[len(assignments) :]
    assert command == ["runtrail", "run", "otlp-ingest"]
    assert [e[0] for e in exports] == ["export", "export"]

    topic = create_topic(kafka_bootstrap, unique_topic("readme-otlp"), partitions=1)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNTRAIL_", "OTEL_"))}
    env |= dict(a.split("=", 1) for a in assignments)  # the README's token
    env |= {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
        "RUNTRAIL_OTLP_INGEST_HTTP_PORT": str(port),
        "RUNTRAIL_METRICS_PORT": "0",
    }
    runtrail = Path(sys.executable).parent / "runtrail"  # the console script pip installed
    receiver = subprocess.Popen(
        [str(runtrail), *command[1:]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/v1/traces"), 30, what="otlp-ingest")
        for _, assignment in exports:  # the agent's side: the README's environment
            name, value = assignment.split("=", 1)
            monkeypatch.setenv(name, value.replace(":4318/", f":{port}/"))
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))  # from the env
        run_id = run_agent(provider)
        provider.shutdown()

        codec = EventCodec()
        messages = consume_all(kafka_bootstrap, topic, expect=11, timeout=30)
        events = [codec.decode(m.value()).event for m in messages]
    finally:
        receiver.terminate()
        _, err = receiver.communicate(timeout=60)
    assert {e.run_id for e in events} == {run_id}
    assert {e.tenant_id for e in events} == {"acme"}  # the README's token's tenant
    assert [e.type for e in events] == EXPECTED_TYPES
    assert receiver.returncode == 0, err[-3000:]
