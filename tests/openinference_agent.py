"""A tool-calling agent traced by OpenInference, exporting to an OTLP/HTTP endpoint.

Run in a process of its own (``python -m tests.openinference_agent URL TOKEN``): the
``OpenAIInstrumentor`` patches the ``openai`` package for the whole process. The agent runs its
loop twice (non-streamed under a CHAIN root span, streamed with usage under an AGENT root span)
against :class:`tests.fake_openai.FakeOpenAI`, in ``using_session("s-1")``, and prints, as one
JSON line, each run's trace ID and what the model server saw (the ground truth).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import openai
from openinference.instrumentation import OITracer, TraceConfig, using_session
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.fake_openai import MODEL, FakeOpenAI

SESSION = "s-1"
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": WEATHER_SCHEMA,
        },
    }
]
#: the runs: (root span kind, streamed)
RUNS = ((OpenInferenceSpanKindValues.CHAIN, False), (OpenInferenceSpanKindValues.AGENT, True))


def weather(city: str) -> str:
    """Text that looks like JSON: it must reach runtrail as the text it is."""
    return json.dumps({"city": city, "temp_c": -3})


def complete(client: openai.OpenAI, messages: list[Any], stream: bool) -> dict[str, Any]:
    """One chat completion; the assistant message as the next request carries it."""
    if not stream:
        answer = (
            client.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, temperature=0.3
            )
            .choices[0]
            .message
        )
        message: dict[str, Any] = {"role": "assistant", "content": answer.content}
        if answer.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in answer.tool_calls]
        return message
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        temperature=0.3,
        stream=True,
        stream_options={"include_usage": True},
    ):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(
                    delta.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = delta.id or call["id"]
                if delta.function is not None:
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""
    reply: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        reply["tool_calls"] = [calls[i] for i in sorted(calls)]
    return reply


def run_tool(tracer: OITracer, call: dict[str, Any]) -> str:
    """The tool, inside an OpenInference TOOL span."""
    name = call["function"]["name"]
    arguments = json.loads(call["function"]["arguments"])
    with tracer.start_as_current_span(
        name, openinference_span_kind=OpenInferenceSpanKindValues.TOOL
    ) as span:
        span.set_tool(name=name, description="The weather in a city.", parameters=WEATHER_SCHEMA)
        span.set_attribute(SpanAttributes.TOOL_ID, call["id"])
        span.set_input(arguments)
        result = weather(**arguments)
        span.set_output(result)
    return result


def agent(
    client: openai.OpenAI, tracer: OITracer, root_kind: OpenInferenceSpanKindValues, stream: bool
) -> str:
    """The loop: ask, run the tools asked for, ask again, until the model answers in text."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You answer weather questions."},
        {"role": "user", "content": "What is the weather in Oslo?"},
    ]
    with tracer.start_as_current_span("weather-agent", openinference_span_kind=root_kind) as root:
        run_id = f"{root.get_span_context().trace_id:032x}"
        while True:
            message = complete(client, messages, stream)
            messages.append(message)
            if not message.get("tool_calls"):
                return run_id
            for call in message["tool_calls"]:
                result = run_tool(tracer, call)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


def main(url: str, token: str) -> None:
    provider = TracerProvider()
    exporter = OTLPSpanExporter(url, headers={"Authorization": f"Bearer {token}"})
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = OITracer(provider.get_tracer(__name__), TraceConfig())
    runs = []
    with FakeOpenAI() as fake, using_session(SESSION):
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)
        for root_kind, stream in RUNS:
            first = len(fake.exchanges)
            run_id = agent(client, tracer, root_kind, stream)
            exchanges = [asdict(e) for e in fake.exchanges[first:]]
            runs.append({"runId": run_id, "root": root_kind.value, "exchanges": exchanges})
    provider.shutdown()
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
