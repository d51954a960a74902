"""The LiteLLM example, executed exactly as written: its code block is extracted from
docs/ADAPTERS.md and run with the test's own ``model`` against the local OpenAI-compatible
server (no network) and the real broker; the run it names is then read back from the topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.events import EventCodec
from tests import readme_blocks as blocks
from tests.fake_openai import FakeOpenAI
from tests.litellm_support import MODEL, litellm, mismatches
from tests.support import consume_all, create_topic, unique_topic

pytestmark = [pytest.mark.kafka]

MARKER = "<!-- tested as written by tests/test_adapter_litellm_readme.py -->"


def test_the_litellm_example_runs_as_written(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("litellmreadme"), partitions=1)
    example = blocks.readme_block(MARKER, what="LiteLLM example")
    with FakeOpenAI() as fake:
        for name, value in {
            "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "RUNTRAIL_EVENTS_TOPIC": topic,
            "RUNTRAIL_TENANT": "acme",
            "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
            "OPENAI_API_BASE": fake.base_url,  # where LiteLLM's openai provider sends
            "OPENAI_API_KEY": "sk-fake",
        }.items():
            monkeypatch.setenv(name, value)
        namespace: dict[str, Any] = {"model": MODEL}
        try:
            source = str(blocks.document_of(MARKER))
            exec(compile(example, source, "exec"), namespace)  # the document, as written
        finally:
            litellm.callbacks = []
    assert namespace["answer"].choices[0].message.content == "The tool said: sunny"
    assert namespace["logger"].dropped == 0

    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in consume_all(kafka_bootstrap, topic, expect=11)]
    assert {(e.run_id, e.session_id, e.tenant_id) for e in events} == {
        ("run-42", "conversation-42", "acme")
    }
    assert [e.type for e in events if e.type.startswith("TOOL")] == ["TOOL_CALL", "TOOL_RESULT"]
    assert events[-1].type == "run.succeeded"
    assert mismatches(events, fake.exchanges) == []
