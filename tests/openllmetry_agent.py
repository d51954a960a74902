"""A tool-calling agent traced by OpenLLMetry, run in a process of its own.

Why a process: traceloop's ``OpenAIInstrumentor`` patches the ``openai`` module for everyone in
the process; here it patches only this one. The real instrumentor over the real ``openai``
client talks to :class:`tests.fake_openai.FakeOpenAI`; the real OTLP/HTTP protobuf exporter posts
every span to the receiver at ``argv[1]`` (bearer token ``argv[2]``). The agent's own spans are
opened as traceloop-sdk's ``@workflow`` and ``@tool`` decorators open them (that package is not
installed): ``<name>.workflow``/``<name>.tool`` with ``traceloop.span.kind``,
``traceloop.entity.name``, and ``traceloop.entity.input``/``output`` as JSON text.

Prints one JSON line: the runs (trace IDs, streamed or not) and every exchange the server saw.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import openai
from openai.types.chat import ChatCompletionFunctionToolParam
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Tracer

from tests.fake_openai import MODEL, FakeOpenAI

WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": -3}


def _entity(tracer: Tracer, name: str, kind: str, inputs: dict[str, Any]) -> Any:
    """A span as traceloop-sdk's decorators open one (the output is set by the caller)."""
    return tracer.start_as_current_span(
        f"{name}.{kind}",
        attributes={
            "traceloop.span.kind": kind,
            "traceloop.entity.name": name,
            "traceloop.workflow.name": "weather_agent",
            "traceloop.entity.input": json.dumps({"args": [], "kwargs": inputs}),
        },
    )


def _ask(client: openai.OpenAI, messages: list[Any], stream: bool) -> dict[str, Any]:
    """One chat completion with the tool offered; the assistant message as a request carries it."""
    if not stream:
        answer = client.chat.completions.create(
            model=MODEL, messages=messages, tools=[WEATHER_TOOL]
        )
        return answer.choices[0].message.model_dump(exclude_none=True)
    chunks = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[WEATHER_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            content.append(delta.content or "")
            for call in delta.tool_calls or []:
                into = calls.setdefault(
                    call.index, {"type": "function", "function": {"name": "", "arguments": ""}}
                )
                if call.id:
                    into["id"] = call.id
                if call.function and call.function.name:
                    into["function"]["name"] += call.function.name
                if call.function and call.function.arguments:
                    into["function"]["arguments"] += call.function.arguments
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def run(client: openai.OpenAI, tracer: Tracer, stream: bool) -> str:
    """The agent loop: ask, run the tools asked for, ask again until the answer is text."""
    question = "What is the weather in Oslo?"
    with _entity(tracer, "weather_agent", "workflow", {"question": question}) as workflow:
        run_id = f"{workflow.get_span_context().trace_id:032x}"
        messages: list[Any] = [{"role": "user", "content": question}]
        while True:
            message = _ask(client, messages, stream)
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for call in message["tool_calls"]:
                arguments = json.loads(call["function"]["arguments"])
                with _entity(tracer, call["function"]["name"], "tool", arguments) as span:
                    result = weather(**arguments)
                    span.set_attribute("traceloop.entity.output", json.dumps(result))
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
        workflow.set_attribute("traceloop.entity.output", json.dumps(message.get("content")))
    return run_id


def main(url: str, token: str) -> None:
    provider = TracerProvider()
    exporter = OTLPSpanExporter(url, headers={"Authorization": f"Bearer {token}"})
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("tests.openllmetry-agent")
    with FakeOpenAI() as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0)
        runs = [
            {"run_id": run(client, tracer, stream), "stream": stream} for stream in (False, True)
        ]
    provider.shutdown()
    print(json.dumps({"runs": runs, "exchanges": [asdict(e) for e in fake.exchanges]}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
