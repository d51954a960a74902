"""The pydantic-ai example of docs/ADAPTERS.md, executed exactly as written.

Its block runs against the real broker with pydantic-ai's own instrumentation, and the agent
it names is the tests' one (``tests/pydantic_ai_support.py``: OpenAI's chat model over
``tests/fake_openai.py``, one function tool). What lands on the topic must be that run as the
model server saw it: its messages, the answer, the tool call's ID, name and arguments, the tool's
result, the tokens, in order, as one run: zero mismatches.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.events import EventCodec
from tests import readme_blocks as blocks
from tests.fake_openai import FakeOpenAI
from tests.pydantic_ai_support import mismatches, weather_agent
from tests.support import consume_all, create_topic, unique_topic
from tests.test_otel_pydantic_ai import form

pytestmark = [pytest.mark.kafka]
MARKER = "<!-- tested as written by tests/test_adapter_pydantic_ai_readme.py -->"


@pytest.fixture
def instrument_all_undone() -> Iterator[None]:
    """The example instruments every agent of the process: undone after the test."""
    from pydantic_ai import Agent

    try:
        yield
    finally:
        Agent.instrument_all(False)


def test_the_pydantic_ai_example_runs_as_written(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    instrument_all_undone: None,
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("readme-pydantic-ai"), partitions=1)
    for name, value in {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_TENANT": "acme",
        "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
    }.items():
        monkeypatch.setenv(name, value)
    block = blocks.readme_block(MARKER, what="pydantic-ai example")
    source = blocks.document_of(MARKER, "pydantic-ai example")
    with FakeOpenAI() as fake:
        namespace: dict[str, Any] = {"agent": weather_agent(fake)}  # the agent it calls yours
        exec(compile(block, str(source), "exec"), namespace)  # as written

    codec = EventCodec()
    messages = consume_all(kafka_bootstrap, topic, expect=11, timeout=30)
    events = sorted((codec.decode(m.value()).event for m in messages), key=lambda e: e.sequence)
    assert mismatches([form(e) for e in events], fake.exchanges) == []
    result = namespace["result"]
    assert events[-3].data.message == result.output
    assert {e.session_id for e in events} == {result.conversation_id}
    assert {e.tenant_id for e in events} == {"acme"}
