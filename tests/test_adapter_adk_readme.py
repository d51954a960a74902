"""The Google ADK example of docs/ADAPTERS.md, run as written, through ``otlp-ingest``.

The block runs in a venv with google-adk (``tests/adk_support.py``), with the variables the text
names and LiteLLM's OpenAI provider pointed at ``tests/fake_openai.py``; ADK's own OTLP exporter
sends its spans to the receiver. What lands on the topic must be the run as the model server saw
it: the system instruction, every message, the tool call's ID, name and arguments, the tool's
result, the answers and tokens (ADK records no response ID), in order, one run in ADK's session: zero mismatches.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests import readme_blocks as blocks
from tests.adk_support import adk_python
from tests.fake_openai import FakeOpenAI
from tests.pydantic_ai_support import mismatches
from tests.support import consume_all
from tests.test_otel_pydantic_ai import form
from tests.test_otlp_ingest import CODEC, TOKEN, Running, receiver  # noqa: F401 (fixture)

pytestmark = [pytest.mark.stack]  # a whole install (a venv of its own) beside the broker
MARKER = "<!-- tested as written by tests/test_adapter_adk_readme.py -->"


@pytest.fixture
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def documented_variables() -> dict[str, str]:
    """The ``export`` lines of the bash block before the example."""
    document = blocks.document_of(MARKER, "Google ADK example").read_text()
    before = document[: document.index(MARKER)]
    bash = before[before.rindex("```bash") :]
    return dict(re.findall(r"^export (\w+)=\"?([^\"\n]+)\"?$", bash, re.M))


def test_the_adk_example_runs_as_written(
    receiver: Running,  # noqa: F811 (the fixture)
    fake_model: FakeOpenAI,
    kafka_bootstrap: str,
) -> None:
    variables = documented_variables()
    assert set(variables) == {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_SEMCONV_STABILITY_OPT_IN",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    }
    python = adk_python()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env |= variables | {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url,  # this test's receiver and token
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{TOKEN}",
        "OPENAI_BASE_URL": fake_model.base_url,  # LiteLLM's OpenAI provider reads it
        "OPENAI_API_KEY": "sk-fake",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # (else LiteLLM asks the network for prices)
    }
    block = blocks.readme_block(MARKER, what="Google ADK example")
    done = subprocess.run(
        [str(python), "-c", block],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert [len(e.message.get("tool_calls") or []) for e in fake_model.exchanges] == [1, 0]
    assert receiver.receiver.publisher.flush(30) == 0

    events = [
        CODEC.decode(m.value()).event
        for m in consume_all(kafka_bootstrap, receiver.topic, expect=11, timeout=30)
    ]
    forms = [form(e) for e in sorted(events, key=lambda e: e.sequence)]
    recorded = [adk_form(f) for f in forms]
    assert mismatches(recorded, fake_model.exchanges, response_id=False) == []  # ADK writes none
    (session,) = {e.session_id for e in events}
    assert re.fullmatch(r"[0-9a-f-]{36}", session), "ADK's session (gen_ai.conversation.id)"


def adk_form(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as the comparison reads it: ADK gives the model a tool's result as the JSON text
    of ``{"result": ...}``, and records it as that object, so the recorded object goes back to the
    text the model was sent; and ADK names the model it calls through LiteLLM with LiteLLM's
    provider prefix (``openai/``), which the wire request does not carry."""
    data = event["data"]
    prompt = data.get("prompt")
    if prompt:
        if isinstance(prompt.get("model"), str):
            prompt["model"] = prompt["model"].removeprefix("openai/")
        for message in prompt.get("messages") or []:
            for part in message.get("parts") or []:
                if part.get("type") == "tool_call_response" and "result" not in part:
                    part["result"] = json.dumps(part.pop("response"))
    return event
