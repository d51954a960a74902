"""Event sequences for the ai4j conformance test, written the way ai4j's runtime emits them.

Each event is an ai4j ``AgentEvent`` in JSON (``type``, ``runId``, ``sessionId``, ``turnId``,
``step``, ``message``, ``payload``) plus ``tenant``, which ai4j does not have: the harness
ignores it, runtrail stamps it. Payloads are the JSON of ai4j's classes (``AgentPrompt``,
``AgentToolCall`` with ``arguments`` as JSON text, ``AgentToolResult`` with ``failed``),
exactly as ``docs/AI4J_FINDINGS.md`` records the real runtime producing them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Ev = dict[str, Any]


def agent_prompt(model: str = "gpt-4o-mini", text: str = "weather in Paris?") -> dict[str, Any]:
    return {
        "items": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        ],
        "model": model,
        "stream": True,
        "temperature": 0.2,
    }


def tool_call(name: str | None, call_id: str | None, arguments: str = "{}") -> dict[str, Any]:
    call = {"arguments": arguments, "callId": call_id, "name": name, "type": "function"}
    return {k: v for k, v in call.items() if v is not None}


def tool_result(
    name: str | None, call_id: str | None, output: str, error: str | None = None
) -> dict[str, Any]:
    """As fastjson2 writes an ``AgentToolResult`` (``failed`` is its derived getter)."""
    failed = error is not None or output.startswith("TOOL_ERROR")
    result: dict[str, Any] = {"callId": call_id, "name": name, "output": output, "failed": failed}
    if error is not None:
        result.update(ok=False, error=error)
    return {k: v for k, v in result.items() if v is not None}


def usage(prompt_tokens: int, completion_tokens: int, rid: str = "resp") -> dict[str, Any]:
    return {
        "id": rid,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def run(
    run_id: str, tenant: str = "acme", turn: str | None = "turn-1", session: str = "sess-1"
) -> Callable[..., Ev]:
    """An event factory for one run: ``e(type, step, message=…, payload=…)``."""

    def e(
        event_type: str, step: int | None = 0, message: str | None = None, payload: Any = None
    ) -> Ev:
        return {
            "type": event_type,
            "runId": run_id,
            "sessionId": session,
            "turnId": turn,
            "step": step,
            "message": message,
            "payload": payload,
            "tenant": tenant,
        }

    return e


def basic() -> dict[str, list[Ev]]:
    """Sequences on which ai4j and runtrail agreed before this wave (and must still)."""
    seqs: dict[str, list[Ev]] = {}
    e = run("run-stream")
    seqs["streamed_deltas"] = [
        e("STEP_START", message="react"),
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_RESPONSE", message="It "),
        e("MODEL_RESPONSE", message="is "),
        e("MODEL_RESPONSE", message="21C."),
        e("MODEL_RESPONSE", payload=usage(30, 4)),
        e("FINAL_OUTPUT", message="It is 21C.", payload=usage(30, 4)),
        e("STEP_END", message="react"),
    ]
    e = run("run-reason")
    seqs["reasoning"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_REASONING", message="look up"),
        e("MODEL_REASONING", message="the weather"),
        e("MODEL_RESPONSE", message="ok"),
        e("MODEL_RESPONSE", payload=usage(10, 2)),
        e("STEP_END", message="react"),
    ]
    e = run("run-retry")
    seqs["retries"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e(
            "MODEL_RETRY",
            message="rate limited",
            payload={"attempt": 1, "maxAttempts": 3, "reason": "429"},
        ),
        e("MODEL_RETRY", message="rate limited", payload={"attempt": 2, "maxAttempts": 3}),
        e("MODEL_RESPONSE", message="done"),
        e("MODEL_RESPONSE", payload=usage(7, 1)),
        e("STEP_END", message="react"),
    ]
    e = run("run-tools", turn=None)
    seqs["tool_key_fallbacks"] = [
        e("TOOL_CALL", 2, "weather", tool_call("weather", "call_1", '{"city":"Paris"}')),
        e("TOOL_CALL", 2, "weather", tool_call("weather", None, '{"city":"Rome"}')),
        e("TOOL_CALL", 2, None, tool_call(None, None, "{}")),
        e("TOOL_RESULT", 2, "{}", tool_result(None, None, "anon-out")),
        e("TOOL_RESULT", 2, "r", tool_result("weather", None, "TOOL_ERROR: boom", "boom")),
        e("TOOL_RESULT", 2, "p", tool_result("weather", "call_1", '{"tempC":21}')),
    ]
    e = run("run-orphan")
    seqs["orphan_result"] = [
        e("TOOL_RESULT", 1, "late", tool_result("weather", "call_9", "late")),
        e("TOOL_CALL", 1, "weather", tool_call("weather", "call_8")),
        e("TOOL_RESULT", 1, "ok", tool_result("weather", "call_8", "ok")),
    ]
    a, g = run("run-shared", tenant="acme"), run("run-shared", tenant="globex")
    seqs["two_tenants"] = [
        a("MODEL_REQUEST", payload=agent_prompt("m-acme")),
        g("MODEL_REQUEST", payload=agent_prompt("m-globex")),
        a("MODEL_RESPONSE", message="acme"),
        g("MODEL_RESPONSE", message="globex"),
        g("STEP_END", message="react"),
        a("TOOL_CALL", 0, "w", tool_call("w", "call_1")),
        g("TOOL_CALL", 0, "w", tool_call("w", "call_1", '{"x":1}')),
        a("TOOL_RESULT", 0, "a", tool_result("w", "call_1", "a")),
        g("TOOL_RESULT", 0, "g", tool_result("w", "call_1", "g")),
        a("STEP_END", message="react"),
    ]
    return seqs


def edge_cases() -> dict[str, list[Ev]]:
    """The edge cases where wave 1 differed from ai4j (issue 12)."""
    seqs: dict[str, list[Ev]] = {}
    e = run("run-norequest")
    seqs["model_events_without_request"] = [
        e("MODEL_REASONING", message="hmm"),
        e("MODEL_RETRY", payload={"attempt": 1, "maxAttempts": 2}),
        e("MODEL_RESPONSE", message="orphan text", payload=usage(1, 1)),
        e("STEP_END", message="react"),
    ]
    e = run("run-afterend")
    seqs["response_after_step_end"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_RESPONSE", message="in time"),
        e("STEP_END", message="react"),
        e("MODEL_RESPONSE", message="too late", payload=usage(2, 2)),
        e("STEP_END", message="react"),
    ]
    e = run("run-second")
    seqs["second_request_in_step"] = [
        e("MODEL_REQUEST", payload=agent_prompt("m1", "first")),
        e("MODEL_RESPONSE", message="call one"),
        e("MODEL_RESPONSE", payload=usage(5, 5, "r1")),
        e("MODEL_REQUEST", payload=agent_prompt("m2", "second")),
        e("MODEL_RESPONSE", message="call two"),
        e("STEP_END", message="react"),
    ]
    e = run("run-duptool")
    call = tool_call("weather", "call_1", '{"city":"Paris"}')
    seqs["duplicate_tool_call"] = [
        e("TOOL_CALL", 0, "weather", call),
        e("MODEL_RESPONSE", payload=usage(1, 1)),
        e("TOOL_CALL", 0, "weather", dict(call)),
        e("TOOL_RESULT", 0, "ok", tool_result("weather", "call_1", "ok")),
    ]
    e = run("run-usage")
    seqs["usage_mid_stream"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_RESPONSE", message="a", payload=usage(12, 3, "chunk-1")),
        e("MODEL_RESPONSE", message="b", payload={"id": "chunk-2"}),
        e("STEP_END", message="react"),
    ]
    e = run("run-emptyreason")
    seqs["empty_reasoning_segment"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_REASONING", message=""),
        e("MODEL_REASONING", message="x"),
        e("MODEL_RESPONSE", message="y"),
        e("STEP_END", message="react"),
    ]
    return seqs


def repeated_call_id() -> list[Ev]:
    """Two *different* calls under one callId before any result: the documented difference."""
    e = run("run-fifo")
    return [
        e("TOOL_CALL", 0, "w", tool_call("w", "dup", '{"n":1}')),
        e("TOOL_CALL", 0, "w", tool_call("w", "dup", '{"n":2}')),
        e("TOOL_RESULT", 0, "one", tool_result("w", "dup", "one")),
        e("TOOL_RESULT", 0, "two", tool_result("w", "dup", "two")),
    ]


def differences() -> dict[str, list[Ev]]:
    """The deliberate differences of docs/CAPTURE.md, each fed to *one* ai4j listener."""
    seqs: dict[str, list[Ev]] = {"fifo": repeated_call_id(), "mixed": basic()["two_tenants"]}
    e = run("run-emptyraw")
    seqs["empty_raw"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_RESPONSE", message="x", payload=usage(3, 1)),
        e("MODEL_RESPONSE", payload={}),
        e("STEP_END"),
    ]
    e = run("run-retry-restart")
    seqs["retry_then_request"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_RETRY", payload={"attempt": 1, "maxAttempts": 3}),
        e("MODEL_REQUEST", payload=agent_prompt()),
        e("MODEL_RESPONSE", message="ok"),
        e("STEP_END"),
    ]
    e = run("run-badusage")
    seqs["usage_not_a_count"] = [
        e("MODEL_REQUEST", payload=agent_prompt()),
        e(
            "MODEL_RESPONSE",
            message="x",
            payload={"usage": {"prompt_tokens": "[REDACTED]", "completion_tokens": 5}},
        ),
        e("STEP_END"),
    ]
    e = run("run-emptyid")
    seqs["empty_call_id"] = [
        e("TOOL_CALL", 0, "w", tool_call("w", "")),
        e("TOOL_RESULT", 0, "ok", tool_result("w", "", "ok")),
    ]
    arrival = [
        ev for ev in basic()["streamed_deltas"] if ev["type"] not in ("STEP_START", "FINAL_OUTPUT")
    ]
    arrival[1], arrival[2] = arrival[2], arrival[1]  # two deltas arrive swapped
    seqs["arrival_order"] = arrival
    return seqs
