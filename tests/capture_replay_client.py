"""A deterministic model client and tool re-invoker for the live-replay CLI tests (no tests here).

``runtrail replay node ID --live --model-client tests.capture_replay_client:make_client``
imports this module and calls the factory. Every call is recorded in :data:`CALLS` (in-process
runs) and, when ``CAPTURE_REPLAY_CLIENT_LOG`` names a file, appended to it as a JSON line
(for runs in a child process), so a test can check the client was called exactly once, with
exactly the captured prompt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from runtrail.events.runtime_events import ToolCall

LOG_ENV = "CAPTURE_REPLAY_CLIENT_LOG"
#: ``(kind, input)`` of every call made through this module, in order.
CALLS: list[tuple[str, Any]] = []


def _record(kind: str, value: Any) -> None:
    CALLS.append((kind, value))
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"kind": kind, "input": value}) + "\n")


class EchoModelClient:
    """Answers every prompt with its last message, upper-cased: same prompt, same answer."""

    def create(self, prompt: Any) -> dict[str, Any]:
        _record("model", prompt)
        messages = prompt.get("messages", []) if isinstance(prompt, dict) else []
        last = messages[-1]["content"] if messages else ""
        return {
            "model": f"echo-of-{prompt.get('model') if isinstance(prompt, dict) else None}",
            "text": str(last).upper(),
            "usage": {"input_tokens": len(str(last)), "output_tokens": len(str(last))},
        }


def make_client() -> EchoModelClient:
    return EchoModelClient()


def make_reinvoker() -> Callable[[ToolCall], dict[str, Any]]:
    def reinvoke(call: ToolCall) -> dict[str, Any]:
        _record("tool", call.model_dump(mode="json", by_alias=True))
        return {"callId": call.call_id, "output": f"re-ran {call.tool_name}", "error": None}

    return reinvoke


def not_a_client() -> object:
    """A factory whose product has no ``create``: the CLI must refuse it clearly."""
    return object()
