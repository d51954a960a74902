"""``RuntrailLogger`` on real LiteLLM calls (``completion`` and ``acompletion``, streamed and
not) against the local OpenAI-compatible server, publishing through a real Publisher to the
real broker; the events are read back from the topic and compared with what the server saw.

What is held: a tool round trip (the model asks for the tool, the caller sends its result, the
model answers) is one run of two steps whose recorded messages, answer text, tool-call IDs,
names and arguments, finish reasons and token counts equal the server's exchanges (zero
mismatches), sync and async, streamed (one node per call, not one per chunk) and not; a call
without a named run is a run by itself; a failed call is recorded with its reason (run.failed,
or MODEL_RETRY when the run goes on); the logger never raises into LiteLLM and counts what it
could not publish; without litellm the import names the extra.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.extras import MissingExtra
from runtrail.publisher import Publisher
from tests.fake_openai import FakeOpenAI
from tests.litellm_support import MODEL, TOOLS, litellm, mismatches
from tests.support import consume_all, create_topic, unique_topic

ROUND_TRIP = [
    ("run.accepted", None), ("run.state_transitioned", None),
    ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1), ("TOOL_CALL", 1), ("TOOL_RESULT", 1),
    ("STEP_END", 1), ("MODEL_REQUEST", 2), ("MODEL_RESPONSE", 2), ("STEP_END", 2),
    ("run.succeeded", 2),
]  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def publisher(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Publisher]:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    topic = create_topic(bootstrap, unique_topic("litellm"), partitions=1)
    settings = Settings(
        bootstrap_servers=bootstrap, events_topic=topic, tenant="acme", spool_dir=tmp_path / "s"
    )
    pub = Publisher(settings)
    try:
        yield pub
    finally:
        pub.close()


def install(sink: Any) -> Any:
    """A ``RuntrailLogger`` on ``sink``, LiteLLM's only callback (imported here: see
    ``tests/litellm_support.py`` on import cost)."""
    from runtrail.adapters.litellm import RuntrailLogger

    logger = RuntrailLogger(sink)
    litellm.callbacks = [logger]
    return logger


@pytest.fixture(autouse=True)
def no_callbacks() -> Iterator[None]:
    yield
    litellm.callbacks = []


def read_back(publisher: Publisher, expect: int) -> list[Any]:
    assert publisher.flush(20.0) == 0
    codec = EventCodec()
    messages = consume_all(
        publisher._settings.bootstrap_servers, publisher.topic, expect=expect, timeout=30
    )
    return [codec.decode(m.value()).event for m in messages]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def assistant(reply: Any) -> dict[str, Any]:
    """The assistant message of a reply, as the next request sends it back."""
    message: dict[str, Any] = reply.choices[0].message.model_dump(exclude_none=True)
    return {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}


def round_trip(fake: FakeOpenAI, *, stream: bool, run_id: str) -> dict[str, Any]:
    """The keyword arguments of each call of a tool round trip in run ``run_id``."""
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
    return {
        "model": MODEL, "api_base": fake.base_url, "api_key": "sk-fake", "tools": TOOLS,
        "stream": stream, "metadata": {"runtrail_run_id": run_id,
                                       "runtrail_session_id": "conv-1"}, **extra,
    }  # fmt: skip


def sync_round_trip(kwargs: dict[str, Any]) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Oslo?"}]
    reply = litellm.completion(messages=messages, **kwargs)
    if kwargs["stream"]:
        reply = litellm.stream_chunk_builder(list(reply), messages=messages)
    call = reply.choices[0].message.tool_calls[0]
    messages += [assistant(reply), {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    answer = litellm.completion(messages=messages, **kwargs)
    if kwargs["stream"]:
        answer = litellm.stream_chunk_builder(list(answer), messages=messages)
    return str(answer.choices[0].message.content)


async def async_round_trip(kwargs: dict[str, Any]) -> str:
    async def complete(messages: list[dict[str, Any]]) -> Any:
        reply = await litellm.acompletion(messages=messages, **kwargs)
        if kwargs["stream"]:
            reply = litellm.stream_chunk_builder([c async for c in reply], messages=messages)
        return reply

    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Oslo?"}]
    reply = await complete(messages)
    call = reply.choices[0].message.tool_calls[0]
    messages += [assistant(reply), {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    answer = await complete(messages)
    return str(answer.choices[0].message.content)


@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_round_trip_is_one_run_equal_to_the_exchanges(
    publisher: Publisher, fake: FakeOpenAI, mode: str, stream: bool
) -> None:
    logger = install(publisher)
    kwargs = round_trip(fake, stream=stream, run_id=f"run-{mode}-{stream}")
    if mode == "sync":
        answer = sync_round_trip(kwargs)
        assert logger.end_run(kwargs["metadata"]["runtrail_run_id"])
    else:

        async def run() -> str:
            answer = await async_round_trip(kwargs)  # the async hooks run on this loop
            await asyncio.to_thread(logger.end_run, kwargs["metadata"]["runtrail_run_id"])
            return answer

        answer = asyncio.run(run())
    assert answer == "The tool said: sunny"
    events = read_back(publisher, expect=len(ROUND_TRIP))
    assert (logger.drops, logger.published, logger.calls) == ({}, len(ROUND_TRIP), 2)
    assert [(e.type, e.step) for e in events] == ROUND_TRIP
    assert {(e.run_id, e.session_id, e.tenant_id) for e in events} == {
        (kwargs["metadata"]["runtrail_run_id"], "conv-1", "acme")
    }
    assert mismatches(events, fake.exchanges) == []
    assert [x.stream for x in fake.exchanges] == [stream, stream]
    result = events[5].data
    tool_message = fake.exchanges[1].request["messages"][-1]
    assert (result.call_id, result.tool_name, result.output) == (
        tool_message["tool_call_id"], "weather", tool_message["content"])  # fmt: skip
    assert [e.data.reason for e in events if e.type == "STEP_END"] == ["tool_use", "final_answer"]
    prompt = events[2].data.prompt
    assert prompt["model"] == "fake-gpt"
    assert prompt["params"].get("stream_options") == kwargs.get("stream_options")


@pytest.mark.kafka
def test_a_call_without_a_named_run_is_a_run_by_itself(
    publisher: Publisher, fake: FakeOpenAI
) -> None:
    logger = install(publisher)
    messages = [{"role": "user", "content": "hello"}]
    for _ in range(2):
        litellm.completion(model=MODEL, api_base=fake.base_url, api_key="sk-fake",
                           messages=messages, temperature=0.3)  # fmt: skip
    assert logger.flush(20.0) == 0
    events = read_back(publisher, expect=12)
    runs = list(dict.fromkeys(e.run_id for e in events))
    assert len(runs) == 2
    for run_id in runs:
        mine = [e for e in events if e.run_id == run_id]
        assert [(e.type, e.step) for e in mine] == [
            ("run.accepted", None), ("run.state_transitioned", None), ("MODEL_REQUEST", 1),
            ("MODEL_RESPONSE", 1), ("STEP_END", 1), ("run.succeeded", 1),
        ]  # fmt: skip
        assert {e.session_id for e in mine} == {run_id}
    assert mismatches(events, fake.exchanges) == []
    assert events[2].data.prompt["params"]["temperature"] == 0.3


@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failed_call_is_recorded_with_its_reason(publisher: Publisher, mode: str) -> None:
    logger = install(publisher)
    kwargs = {"model": MODEL, "api_base": f"http://127.0.0.1:{closed_port()}/v1",
              "api_key": "sk-fake", "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    with pytest.raises(litellm.InternalServerError) as raised:
        if mode == "sync":
            litellm.completion(**kwargs)
        else:

            async def call() -> None:
                try:
                    await litellm.acompletion(**kwargs)
                finally:
                    await asyncio.to_thread(logger.flush, 20.0)

            asyncio.run(call())
    assert logger.flush(20.0) == 0
    events = read_back(publisher, expect=5)
    assert [(e.type, e.step) for e in events] == [
        ("run.accepted", None), ("run.state_transitioned", None), ("MODEL_REQUEST", 1),
        ("STEP_END", 1), ("run.failed", 1),
    ]  # fmt: skip
    assert events[3].data.reason == "error"
    assert "Connection error" in events[4].data.reason
    assert events[4].data.reason in str(raised.value) or str(raised.value) in events[4].data.reason


@pytest.mark.kafka
def test_a_failed_call_retried_in_a_named_run_is_a_model_retry(
    publisher: Publisher, fake: FakeOpenAI
) -> None:
    logger = install(publisher)
    messages = [{"role": "user", "content": "hi"}]
    meta = {"runtrail_run_id": "run-retry"}
    with pytest.raises(litellm.InternalServerError):
        litellm.completion(model=MODEL, api_base=f"http://127.0.0.1:{closed_port()}/v1",
                           api_key="sk-fake", messages=messages, metadata=meta)  # fmt: skip
    litellm.completion(model=MODEL, api_base=fake.base_url, api_key="sk-fake",
                       messages=messages, metadata=meta)  # fmt: skip
    assert logger.end_run("run-retry")
    events = read_back(publisher, expect=8)
    assert [(e.type, e.step) for e in events] == [
        ("run.accepted", None), ("run.state_transitioned", None), ("MODEL_REQUEST", 1),
        ("MODEL_RETRY", 1), ("MODEL_REQUEST", 1), ("MODEL_RESPONSE", 1), ("STEP_END", 1),
        ("run.succeeded", 1),
    ]  # fmt: skip
    assert events[3].data.attempt == 1 and "Connection error" in events[3].data.reason
    assert mismatches(events[4:], fake.exchanges) == []


class RefusingSink:
    """A publisher that refuses every event, or raises."""

    def __init__(self, raises: bool) -> None:
        self.raises = raises

    def publish(self, *args: Any, **kwargs: Any) -> str | None:
        if self.raises:
            raise RuntimeError("the sink broke")
        return None

    def flush(self, timeout: float = 0.0) -> int:
        return 0


@pytest.mark.parametrize("raises", [False, True], ids=["refused", "raising"])
def test_the_logger_never_raises_into_litellm_and_counts_drops(
    fake: FakeOpenAI, raises: bool
) -> None:
    logger = install(RefusingSink(raises))
    reply = litellm.completion(model=MODEL, api_base=fake.base_url, api_key="sk-fake",
                               messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert reply.choices[0].message.content == "Answer number 1."
    started = time.monotonic()
    logger.flush(30.0)
    # nothing is left waiting for an outcome, even after a publish that raised
    assert time.monotonic() - started < 10.0
    assert logger.published == 0
    assert logger.drops == ({"error": 1} if raises else {"rejected": 6})
    assert logger.dropped == sum(logger.drops.values())


def test_without_litellm_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name == "litellm" or name.startswith("litellm."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "litellm", None)  # an import of it fails: not installed
    monkeypatch.delitem(sys.modules, "runtrail.adapters.litellm", raising=False)
    with pytest.raises(MissingExtra) as missing:
        importlib.import_module("runtrail.adapters.litellm")
    assert missing.value.extra == "litellm"
    assert str(missing.value).endswith("pip install 'runtrail[litellm]'")
