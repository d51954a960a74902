"""The OpenTelemetry GenAI example, executed exactly as written: its code block,
extracted from docs/ADAPTERS.md, runs against the real broker, and the run it traced is on the topic
(lifecycle, the model call as one step, its tokens)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.events import EventCodec
from tests import readme_blocks as blocks
from tests.support import consume_all, create_topic, unique_topic

pytestmark = [pytest.mark.kafka]

README = blocks.README
MARKER = "<!-- tested as written by tests/test_readme_otel.py -->"


def readme_block() -> str:
    return blocks.readme_block(MARKER, what="OpenTelemetry example")


def test_the_readme_otel_example_runs_as_written(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("readme-otel"), partitions=1)
    for name, value in {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_TENANT": "acme",
        "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
    }.items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, Any] = {}
    exec(compile(readme_block(), str(README), "exec"), namespace)  # the README, as written

    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in consume_all(kafka_bootstrap, topic, expect=6)]
    assert [e.type for e in events] == [
        "run.accepted",
        "run.state_transitioned",
        "MODEL_REQUEST",
        "MODEL_RESPONSE",
        "STEP_END",
        "run.succeeded",
    ]
    assert {e.tenant_id for e in events} == {"acme"}
    response = events[3].data.model_dump(mode="json", by_alias=True)
    assert response["message"] == "hello"
    assert response["raw"]["usage"] == {"input_tokens": 5, "output_tokens": 1}
