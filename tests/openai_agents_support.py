"""``Model``s of the tests' own for the OpenAI Agents SDK (no network), their tools, and a
processor that keeps what the SDK traced.

:class:`ScriptedModel` traces itself as the SDK's own Chat Completions and LiteLLM models do:
one Generation span per call, with the input, model, configuration, output and usage;
:class:`ResponsesModel` as its Responses model does. :class:`SpanlessModel` is a custom
``Model`` as users write them: it opens no span at all. Answers are scripted: output items (a
tool call, a message) or an exception to raise.

Test modules import this module (and the SDK) inside their tests, not at module level: the SDK
takes a second of CPU to import, and every test process collects every test module.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, ModelSettings, Usage, function_tool
from agents.models.interface import Model, ModelTracing
from agents.tracing import Span, Trace, TracingProcessor, generation_span
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

Answer = list[Any] | BaseException


def say(text: str, item_id: str = "msg-1") -> ResponseOutputMessage:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(
        type="message", id=item_id, role="assistant", status="completed", content=[part]
    )


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments, separators=(",", ":")),
        id=f"fc-{call_id}",
    )


class ScriptedModel(Model):
    """Answers each call with the next scripted answer; records the inputs it was given."""

    name = "scripted-llm-1"

    def __init__(self, answers: Iterable[Answer], *, tokens: tuple[int, int] = (12, 5)) -> None:
        self.answers = list(answers)
        self.inputs: list[list[Any]] = []
        self.tokens = tokens

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> ModelResponse:
        config = {k: v for k, v in model_settings.to_json_dict().items() if v is not None}
        with generation_span(model=self.name, model_config=config) as span:
            messages = [{"role": "system", "content": system_instructions}]
            messages += input if isinstance(input, list) else [{"role": "user", "content": input}]
            self.inputs.append(messages)
            span.span_data.input = messages
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                span.set_error({"message": str(answer), "data": None})
                raise answer
            span.span_data.output = [item.model_dump() for item in answer]
            fed, made = self.tokens
            span.span_data.usage = {"input_tokens": fed, "output_tokens": made}
            usage = Usage(requests=1, input_tokens=fed, output_tokens=made, total_tokens=fed + made)
            return ModelResponse(output=answer, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function_tool
def explode(reason: str) -> str:
    """A tool that always fails."""
    raise ValueError(f"boom: {reason}")


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def forecaster(model: Any) -> Agent[Any]:
    """An agent with one tool, ``weather``, asking ``model``."""
    return Agent(name="forecaster", instructions="Tell the weather.", model=model, tools=[weather])


def ledger_tool(path: Path) -> Any:
    """A tool with a side effect: appends one line per call to ``path``."""

    @function_tool
    def deploy(service: str) -> str:
        """Deploy a service (writes the ledger)."""
        with path.open("a", encoding="utf-8") as out:
            out.write(service + "\n")
        return f"deployed {service}"

    return deploy


class SpanlessModel(Model):
    """Answers each call with the next scripted ``ModelResponse`` (or raises the exception)
    and traces nothing; records the inputs it was given."""

    def __init__(self, answers: Iterable[ModelResponse | BaseException]) -> None:
        self.answers = list(answers)
        self.inputs: list[str | list[Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> ModelResponse:
        self.inputs.append(input)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the spanless model does not stream")


class ResponsesModel(ScriptedModel):
    """Traces itself as the SDK's Responses API model does: a Response span holding the
    provider's ``Response`` object, the input and the usage."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> ModelResponse:
        from agents.tracing import response_span
        from openai.types.responses import Response

        with response_span() as span:
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                span.set_error(
                    {"message": "Error getting response", "data": {"error": str(answer)}}
                )
                raise answer
            fed, made = self.tokens
            usage = {"input_tokens": fed, "output_tokens": made, "total_tokens": fed + made,
                     "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                     "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
            response = Response.model_validate({
                "id": f"resp-{len(self.inputs)}", "created_at": 0, "model": self.name,
                "object": "response", "output": [item.model_dump() for item in answer],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "temperature": 0.25, "usage": usage,
            })  # fmt: skip
            self.inputs.append(list(input) if isinstance(input, list) else [input])
            span.span_data.usage = {"input_tokens": fed, "output_tokens": made}
            span.span_data.response = response
            span.span_data.input = input
            total = Usage(requests=1, input_tokens=fed, output_tokens=made, total_tokens=fed + made)
            return ModelResponse(output=answer, usage=total, response_id=response.id)


class Seen(TracingProcessor):
    """What the SDK traced: each ended span, in order (the test's own record)."""

    def __init__(self) -> None:
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        pass

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def of(self, trace_id: str, kind: str) -> list[Any]:
        return [s.span_data for s in self.spans if s.trace_id == trace_id and
                s.span_data.type == kind]  # fmt: skip
