"""An agent instrumented with ``opentelemetry-instrumentation-openai-v2``, run as its own process.

Why a process: an instrumentor patches ``openai`` for the whole interpreter, and the mode it
runs in (content in log records, or on spans) is read from the environment when it starts.

It runs a tool-calling loop against ``tests/fake_openai.py`` (``--base-url``) under an app span
(``invoke_agent``) with the tool in an ``execute_tool`` span, as an application instrumented
this way does, and exports spans and log records with the real OTLP/HTTP protobuf exporters to
``--endpoint`` (``/v1/traces``, ``/v1/logs``). The loggers are shut down before the tracers, as
``atexit`` does for providers set up in that order. Prints the trace ID.

    python -m tests.otel_openai_v2_agent --endpoint URL --token T --base-url URL [--stream]
"""

from __future__ import annotations

import argparse
import json

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def weather(city: str) -> str:
    """The tool: its result is JSON-looking text, which must stay text."""
    return json.dumps({"city": city, "temp_c": -3})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()

    import openai
    from opentelemetry import _logs, trace
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    headers = {"Authorization": f"Bearer {args.token}"}
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(f"{args.endpoint}/v1/traces", headers=headers))
    )
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(f"{args.endpoint}/v1/logs", headers=headers))
    )
    _logs.set_logger_provider(logger_provider)
    OpenAIInstrumentor().instrument()

    client = openai.OpenAI(base_url=args.base_url, api_key="sk-fake")
    tracer = trace.get_tracer("weather-agent")
    messages: list[dict[str, object]] = [{"role": "user", "content": "Weather in Oslo?"}]
    extra: dict[str, object] = {}
    if args.stream:
        extra = {"stream": True, "stream_options": {"include_usage": True}}
    with tracer.start_as_current_span(
        "invoke_agent weather", attributes={"gen_ai.operation.name": "invoke_agent"}
    ) as agent:
        for _ in range(4):
            answer = _complete(client, messages, extra)
            calls = answer.get("tool_calls") or []
            messages.append(answer)
            if not calls:
                break
            for call in calls:
                arguments = call["function"]["arguments"]
                with tracer.start_as_current_span(
                    "execute_tool get_weather",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "get_weather",
                        "gen_ai.tool.call.id": call["id"],
                        "gen_ai.tool.call.arguments": arguments,
                    },
                ) as tool:
                    result = weather(**json.loads(arguments))
                    tool.set_attribute("gen_ai.tool.call.result", result)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        trace_id = f"{agent.get_span_context().trace_id:032x}"
    logger_provider.shutdown()
    tracer_provider.shutdown()
    print(trace_id)


def _complete(
    client: object, messages: list[dict[str, object]], extra: dict[str, object]
) -> dict[str, object]:
    """One chat completion; the assistant message as the next request carries it."""
    response = client.chat.completions.create(  # type: ignore[attr-defined]
        model="fake-gpt", messages=messages, tools=[WEATHER_TOOL], **extra
    )
    if not extra:
        message = response.choices[0].message
        calls = [c.model_dump() for c in message.tool_calls or []]
        return {
            "role": "assistant",
            "content": message.content,
            **({"tool_calls": calls} if calls else {}),
        }
    content: list[str] = []
    calls_by_index: dict[int, dict[str, object]] = {}
    for chunk in response:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for call in delta.tool_calls or []:
                slot = calls_by_index.setdefault(
                    call.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                function = slot["function"]
                assert isinstance(function, dict)
                if call.id:
                    slot["id"] = call.id
                if call.function and call.function.name:
                    function["name"] = call.function.name
                if call.function and call.function.arguments:
                    function["arguments"] += call.function.arguments
    message: dict[str, object] = {"role": "assistant", "content": "".join(content) or None}
    if calls_by_index:
        message["tool_calls"] = [calls_by_index[i] for i in sorted(calls_by_index)]
    return message


if __name__ == "__main__":
    main()
