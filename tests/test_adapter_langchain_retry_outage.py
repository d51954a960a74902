"""Issue-13 bullets of the LangChain handler that tests/test_adapter_langchain.py leaves out,
against the real broker:

* ``on_chat_model_start`` → MODEL_REQUEST "with the prompt, model and invocation parameters":
  the model the call names and the parameters that shape the answer (the client's own, and
  those bound to the call), without the client's bookkeeping (``_type``, ``stream``).

* ``on_retry`` → MODEL_RETRY: a provider's own retry *inside one call* (LangChain calls
  ``run_manager.on_retry`` from a tenacity ``before_sleep``, as its provider packages do) is one
  MODEL_RETRY with tenacity's attempt number and the error, in the call's step, and the call
  stays one MODEL_REQUEST answered by one MODEL_RESPONSE.
* "It never takes the agent down: the publisher's rules hold": with no broker, a LangGraph agent
  with the handler runs without waiting for it, the run goes to the publisher's spool, and a
  later publisher on the same spool sends it, complete and in order.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
import tenacity
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from runtrail.adapters.langchain import RuntrailCallbackHandler
from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.publisher import Publisher
from tests.support import consume_all, create_topic, unique_topic, wait_for
from tests.test_adapter_langchain import add, react_graph

pytestmark = [pytest.mark.kafka]


class ProviderRetrying(BaseChatModel):
    """Retries inside one call the way LangChain's provider clients do: tenacity, with
    ``run_manager.on_retry`` as ``before_sleep``. The first ``failures`` attempts time out."""

    failures: int = 2

    @property
    def _llm_type(self) -> str:
        return "provider-retrying"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        attempts = iter(range(self.failures + 1))

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if run_manager is not None:
                run_manager.on_retry(state)

        @tenacity.retry(
            retry=tenacity.retry_if_exception_type(TimeoutError),
            stop=tenacity.stop_after_attempt(self.failures + 1),
            wait=tenacity.wait_none(),
            before_sleep=before_sleep,
            reraise=True,
        )
        def call() -> ChatResult:
            if next(attempts) < self.failures:
                raise TimeoutError("read timed out")
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="ok"))])

        return call()


class Tuned(BaseChatModel):
    """A chat model with provider-style parameters; answers "ok"."""

    model_name: str = "tuned-7b"
    temperature: float = 0.2
    max_tokens: int | None = None

    @property
    def _llm_type(self) -> str:
        return "tuned"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "temperature": self.temperature,
                "max_tokens": self.max_tokens}  # fmt: skip

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="ok"))])


def settings_for(bootstrap: str, tmp_path: Path, topic: str) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap, events_topic=topic, tenant="acme", spool_dir=tmp_path / "sp"
    )


def read_events(bootstrap: str, topic: str, expect: int) -> list[Any]:
    codec = EventCodec()
    messages = consume_all(bootstrap, topic, expect=expect, timeout=30)
    return [codec.decode(m.value()).event for m in messages]


def test_a_model_request_names_the_model_and_its_invocation_parameters(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("lcparams"), partitions=1)
    with Publisher(settings_for(kafka_bootstrap, tmp_path, topic)) as publisher:
        handler = RuntrailCallbackHandler(publisher, run_id="lc-params")
        model = Tuned().bind(stop=["END"], seed=7)
        assert model.invoke("hi", config={"callbacks": [handler]}).content == "ok"
        assert publisher.flush(20.0) == 0
    events = read_events(kafka_bootstrap, topic, expect=6)
    (request,) = [e.data for e in events if e.type == "MODEL_REQUEST"]
    assert request.prompt == {
        "model": "tuned-7b",
        "messages": [{"role": "human", "content": "hi"}],
        "parameters": {"temperature": 0.2, "stop": ["END"], "seed": 7},  # max_tokens unset
    }


def test_a_provider_retry_inside_one_call_is_a_model_retry(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("lcretry"), partitions=1)
    with Publisher(settings_for(kafka_bootstrap, tmp_path, topic)) as publisher:
        handler = RuntrailCallbackHandler(publisher, run_id="lc-provider-retry")
        assert ProviderRetrying().invoke("hi", config={"callbacks": [handler]}).content == "ok"
        assert publisher.flush(20.0) == 0
    assert (handler.failures, handler.rejected) == (0, 0)

    events = read_events(kafka_bootstrap, topic, expect=8)
    assert [(e.type, e.step) for e in events[2:]] == [
        ("MODEL_REQUEST", 1), ("MODEL_RETRY", 1), ("MODEL_RETRY", 1), ("MODEL_RESPONSE", 1),
        ("STEP_END", 1), ("run.succeeded", 1),
    ]  # fmt: skip
    retries = [(e.data.attempt, e.data.reason) for e in events if e.type == "MODEL_RETRY"]
    assert retries == [(1, "TimeoutError: read timed out"), (2, "TimeoutError: read timed out")]
    assert events[5].data.message == "ok"


def test_broker_down_the_agent_goes_on_and_the_spooled_run_arrives_later(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens here
    topic = create_topic(kafka_bootstrap, unique_topic("lcdown"), partitions=1)
    down = settings_for(dead, tmp_path, topic).model_copy(update={"delivery_timeout_ms": 1000})
    answers = iter(
        [
            AIMessage(
                content="", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "t"}]
            ),
            AIMessage(content="five"),
        ]
    )
    graph = react_graph(GenericFakeChatModel(messages=answers), [add])
    publisher = Publisher(down, retry_backoff_s=60)
    handler = RuntrailCallbackHandler(publisher, run_id="lc-down")
    started = time.monotonic()
    state = graph.invoke({"messages": [HumanMessage("add")]}, config={"callbacks": [handler]})
    assert time.monotonic() - started < 2.0  # the agent never waited for the broker
    assert state["messages"][-1].content == "five"
    assert (handler.failures, handler.rejected) == (0, 0)
    wait_for(lambda: publisher.stats().spool_depth == 12, 20, what="the run spooled")
    publisher.close(timeout=1)

    later = Publisher(settings_for(kafka_bootstrap, tmp_path, topic))
    try:
        assert later.drain(30)
    finally:
        later.close()
    events = read_events(kafka_bootstrap, topic, expect=12)
    assert {e.run_id for e in events} == {"lc-down"}
    assert [e.sequence for e in events] == list(range(1, 13))
    assert [e.type for e in events][-1] == "run.succeeded"
