"""What the LiteLLM adapter's tests share: litellm imported offline, the tool they offer, and
the comparison of what runtrail recorded with what the model server saw.

``LITELLM_LOCAL_MODEL_COST_MAP`` is set before litellm is imported: otherwise its import asks
the network for the model cost map (seconds without a network).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.fake_openai import Exchange


class _Litellm:
    """``litellm``, imported on first use: its import takes over 4 s, and every test process
    that only collects these tests (the whole suite, ``make test-fast``) would pay it."""

    def _module(self) -> Any:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm as module

        return module

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("pytest"):
            # what pytest's collection asks of every module attribute: not litellm's to answer
            raise AttributeError(name)
        return getattr(self._module(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._module(), name, value)


litellm: Any = _Litellm()

__all__ = ["MODEL", "TOOLS", "litellm", "mismatches"]

MODEL = "openai/fake-gpt"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def mismatches(events: list[Any], exchanges: list[Exchange]) -> list[str]:
    """Where the recorded model calls and tool calls differ from the server's exchanges, in
    order: messages, tools, answer text, tool-call IDs/names/arguments, finish reason, tokens."""
    out: list[str] = []
    requests = [e.data.prompt for e in events if e.type == "MODEL_REQUEST"]
    responses = [e.data for e in events if e.type == "MODEL_RESPONSE"]
    answered = [x for x in exchanges]
    if len(requests) != len(answered):
        out.append(f"{len(requests)} MODEL_REQUEST for {len(answered)} exchanges")
    for n, (prompt, exchange) in enumerate(zip(requests, answered, strict=False)):
        sent = exchange.request
        if prompt["messages"] != sent["messages"]:
            out.append(f"call {n}: messages {prompt['messages']} != {sent['messages']}")
        if prompt["tools"] != sent.get("tools"):
            out.append(f"call {n}: tools {prompt['tools']} != {sent.get('tools')}")
    if len(responses) != len(answered):
        out.append(f"{len(responses)} MODEL_RESPONSE for {len(answered)} exchanges")
    for n, (response, exchange) in enumerate(zip(responses, answered, strict=False)):
        if response.message != (exchange.message.get("content") or None):
            out.append(f"call {n}: text {response.message!r} != {exchange.message}")
        choice = response.raw["choices"][0]
        if choice["finish_reason"] != exchange.finish_reason:
            out.append(f"call {n}: finish {choice['finish_reason']} != {exchange.finish_reason}")
        recorded = [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in choice["message"].get("tool_calls") or []
        ]
        if recorded != _asked(exchange):
            out.append(f"call {n}: tool calls {recorded} != {_asked(exchange)}")
        usage = {k: response.raw["usage"][k] for k in exchange.usage}
        if usage != exchange.usage:
            out.append(f"call {n}: usage {usage} != {exchange.usage}")
    tool_calls = [(e.data.call_id, e.data.tool_name, e.data.arguments)
                  for e in events if e.type == "TOOL_CALL"]  # fmt: skip
    asked = [call for exchange in answered for call in _asked(exchange)]
    if tool_calls != asked:
        out.append(f"TOOL_CALL {tool_calls} != asked {asked}")
    return out


def _asked(exchange: Exchange) -> list[tuple[str, str, Any]]:
    return [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in exchange.message.get("tool_calls") or []
    ]
