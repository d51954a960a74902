"""A GenAI-instrumented agent run of the tests' own, traced with the real OpenTelemetry SDK.

The spans follow the GenAI semantic conventions as an instrumented agent emits them: one
``invoke_agent`` span, under it ``chat`` spans (one per step) and ``execute_tool`` spans, plus
one non-GenAI span (an HTTP call) that the mapping drops and counts. ``EXPECTED`` is what the
spans said, for comparison with the records the services wrote.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

SECRET = "sk-live-" + "a1b2c3d4e5f6a7b8c9d0e1f2"  # an API key shape the redactor masks

STEPS: list[dict[str, Any]] = [
    {
        "input": [{"role": "user", "parts": [{"type": "text", "content": "weather in Oslo?"}]}],
        "output": [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Let me look."},
                    {
                        "type": "tool_call",
                        "id": "call-1",
                        "name": "weather",
                        "arguments": {"city": "Oslo"},
                    },
                ],
                "finish_reason": "tool_call",
            }
        ],
        "usage": (12, 7),
        "tool": ("call-1", "weather", {"city": "Oslo", "api_key": SECRET}, {"temp_c": -3}),
    },
    {
        "input": [
            {"role": "user", "parts": [{"type": "text", "content": "weather in Oslo?"}]},
            {
                "role": "tool",
                "parts": [
                    {"type": "tool_call_response", "id": "call-1", "response": {"temp_c": -3}}
                ],
            },
        ],
        "output": [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "It is -3 C in Oslo."}],
                "finish_reason": "stop",
            }
        ],
        "usage": (30, 9),
        "tool": None,
    },
]


def run_agent(provider: TracerProvider, *, fail: bool = False, conversation: str = "conv-1") -> str:
    """Trace one agent run; its trace ID (the runtrail run ID)."""
    tracer = provider.get_tracer("tests.otel-agent")
    with tracer.start_as_current_span(
        "invoke_agent weather-bot",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "weather-bot",
            "gen_ai.conversation.id": conversation,
        },
    ) as agent:
        run_id = f"{agent.get_span_context().trace_id:032x}"
        for step in STEPS:
            with tracer.start_as_current_span(
                "chat gpt-test",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-test",
                    "gen_ai.request.temperature": 0.2,
                    "gen_ai.conversation.id": conversation,
                    "gen_ai.input.messages": json.dumps(step["input"]),
                    "gen_ai.output.messages": json.dumps(step["output"]),
                    "gen_ai.response.model": "gpt-test-0613",
                    "gen_ai.response.finish_reasons": [step["output"][0]["finish_reason"]],
                    "gen_ai.usage.input_tokens": step["usage"][0],
                    "gen_ai.usage.output_tokens": step["usage"][1],
                },
            ):
                pass
            if step["tool"] is not None:
                call_id, name, arguments, result = step["tool"]
                with (
                    tracer.start_as_current_span(
                        f"execute_tool {name}",
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": name,
                            "gen_ai.tool.call.id": call_id,
                            "gen_ai.tool.call.arguments": json.dumps(arguments),
                            "gen_ai.tool.call.result": json.dumps(result),
                        },
                    ),
                    tracer.start_as_current_span("GET /weather", attributes={"http.method": "GET"}),
                ):
                    pass
        if fail:
            agent.set_status(Status(StatusCode.ERROR, "agent gave up"))
    return run_id


def expected_model_nodes() -> list[dict[str, Any]]:
    """(step, prompt messages, output text, tokens) the chat spans said."""
    out = []
    for i, step in enumerate(STEPS, start=1):
        text = "".join(p["content"] for p in step["output"][0]["parts"] if p["type"] == "text")
        out.append(
            {
                "step": i,
                "messages": step["input"],
                "text": text,
                "tokens": step["usage"],
                "outputMessages": step["output"],
            }
        )
    return out


def run_nested_agent(provider: TracerProvider, **session: Any) -> str:
    """Trace one run nested the way Google ADK nests it: each tool span inside the model span
    that asked for it, so the model span ends after its tool's. ``session``: attributes of the
    agent and model spans (as ADK sets its session on both). Its trace ID."""
    tracer = provider.get_tracer("tests.nested-agent")
    with tracer.start_as_current_span(
        "invoke_agent weather-bot",
        attributes={"gen_ai.operation.name": "invoke_agent", **session},
    ) as agent:
        run_id = f"{agent.get_span_context().trace_id:032x}"
        for step in STEPS:
            with tracer.start_as_current_span(
                "call_llm",
                attributes={
                    "gen_ai.operation.name": "generate_content",
                    "gen_ai.request.model": "gemini-test",
                    "gen_ai.input.messages": json.dumps(step["input"]),
                    "gen_ai.output.messages": json.dumps(step["output"]),
                    **session,
                },
            ):
                if step["tool"] is not None:
                    call_id, name, arguments, result = step["tool"]
                    with tracer.start_as_current_span(
                        f"execute_tool {name}",
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": name,
                            "gen_ai.tool.call.id": call_id,
                            "gen_ai.tool.call.arguments": json.dumps(arguments),
                            "gen_ai.tool.call.result": json.dumps(result),
                        },
                    ):
                        pass
    return run_id
