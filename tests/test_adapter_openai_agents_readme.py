"""The OpenAI Agents SDK example, executed exactly as written: its code block is
extracted from docs/ADAPTERS.md and run with the test's own ``model`` (no network) against the real
broker; the run it names is then read back from the topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.events import EventCodec
from tests import readme_blocks as blocks
from tests.support import consume_all, create_topic, unique_topic

pytestmark = [pytest.mark.kafka]

README = blocks.README
MARKER = "<!-- tested as written by tests/test_adapter_openai_agents_readme.py -->"


def readme_block() -> str:
    return blocks.readme_block(MARKER, what="OpenAI Agents SDK example")


def test_the_readme_openai_agents_example_runs_as_written(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents.tracing import set_trace_processors

    from tests.openai_agents_support import ScriptedModel, call, say

    topic = create_topic(kafka_bootstrap, unique_topic("oareadme"), partitions=1)
    for name, value in {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_TENANT": "acme",
        "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
    }.items():
        monkeypatch.setenv(name, value)
    model = ScriptedModel([[call("add", {"a": 2, "b": 3}, "call-1")], [say("5")]])
    namespace: dict[str, Any] = {"model": model}
    set_trace_processors([])  # the SDK's own exporter would try its backend
    try:
        exec(compile(readme_block(), str(README), "exec"), namespace)  # the README, as written
    finally:
        set_trace_processors([])
    assert namespace["result"].final_output == "5"
    assert namespace["processor"].dropped == 0

    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in consume_all(kafka_bootstrap, topic, expect=11)]
    assert {(e.run_id, e.session_id, e.tenant_id) for e in events} == {
        ("run-42", "conversation-42", "acme")
    }
    assert [e.type for e in events if e.type.startswith("TOOL")] == ["TOOL_CALL", "TOOL_RESULT"]
    assert events[-1].type == "run.succeeded"
