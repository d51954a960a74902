"""The conventions example of docs/ADAPTERS.md, run as written once per row of its table.

The block is run in its own process with its import line replaced by each row's (the one line
the table says differs), the environment the text names (the OTLP endpoint and header, the
row's own variable), and the `openai` client pointed at ``tests/fake_openai.py``. What lands on
the topic must be the agent's one model call: its message and the model's answer.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests import readme_blocks as blocks
from tests.fake_openai import FakeOpenAI
from tests.support import consume_all
from tests.test_otlp_ingest import CODEC, TOKEN, Running, receiver  # noqa: F401 (fixture)

pytestmark = [pytest.mark.kafka]
MARKER = "<!-- tested as written by tests/test_readme_conventions.py -->"
YOURS = "  # yours: see the table"


def table() -> dict[str, tuple[str, dict[str, str]]]:
    """Each convention's instrumentor line and the variables its row names."""
    document = blocks.document_of(MARKER, "conventions example").read_text()
    text = document[document.index(MARKER) :]
    rows: dict[str, tuple[str, dict[str, str]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].startswith("`from "):
            variables = dict(re.findall(r"`([A-Z_]+)=([^`]+)`", cells[0]))
            rows[cells[0].split(" (")[0].split(",")[0]] = (cells[2].strip("`"), variables)
        elif rows and not line.startswith("|"):
            break
    return rows


ROWS = table()


@pytest.fixture
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def test_the_table_has_the_three_conventions() -> None:
    assert sorted(ROWS) == ["OTel GenAI", "OpenInference", "OpenLLMetry"]
    for line, _ in ROWS.values():
        assert line.startswith("from ") and line.endswith(" import OpenAIInstrumentor")


@pytest.mark.parametrize("convention", sorted(ROWS))
def test_the_conventions_example_runs_as_written(
    receiver: Running,  # noqa: F811 (the fixture)
    fake_model: FakeOpenAI,
    kafka_bootstrap: str,
    convention: str,
) -> None:
    block = blocks.readme_block(MARKER, what="conventions example")
    lines = block.splitlines()
    mine = [i for i, line in enumerate(lines) if line.endswith(YOURS)]
    assert len(mine) == 1, "the block marks its one instrumentor line"
    instrumentor, variables = ROWS[convention]
    lines[mine[0]] = instrumentor
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url.rsplit("/v1/", 1)[0],
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{TOKEN}",
        "OPENAI_BASE_URL": fake_model.base_url,
        "OPENAI_API_KEY": "sk-fake",
        **variables,
    }
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(lines)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert receiver.receiver.publisher.flush(30) == 0
    events = [
        CODEC.decode(m.value()).event
        for m in consume_all(kafka_bootstrap, receiver.topic, expect=5, timeout=30)
    ]
    types = [e.type for e in sorted(events, key=lambda e: e.sequence)]
    assert types[0] == "run.accepted" and types[-1] == "run.succeeded"
    (request,) = [data(e) for e in events if e.type == "MODEL_REQUEST"]
    (response,) = [data(e) for e in events if e.type == "MODEL_RESPONSE"]
    (exchange,) = fake_model.exchanges
    assert texts(request["prompt"]["messages"]) == ["Say hi."]
    assert response["message"] == exchange.message["content"]
    usage = {"input_tokens": exchange.usage["prompt_tokens"]}
    usage["output_tokens"] = exchange.usage["completion_tokens"]
    assert response["raw"]["usage"] == usage


def data(event: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = event.data.model_dump(mode="json", by_alias=True)
    return dumped


def texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of each message, in either recorded form (``parts`` or ``content``)."""
    out = []
    for message in messages:
        if isinstance(message.get("content"), str):
            out.append(message["content"])
        for part in message.get("parts") or []:
            if part.get("type") == "text":
                out.append(part["content"])
    return out
