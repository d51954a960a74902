"""Prompts and answers as chat messages: role, text, tool calls and tool results, read from
whichever form the adapter recorded.

MODEL_REQUEST prompts reach the explorer in several forms, all kept as written:

* GenAI semantic conventions (the OpenTelemetry adapter, OpenInference): ``messages`` of
  ``{role, parts: [{type: text, content} | {type: tool_call, id, name, arguments} |
  {type: tool_call_response, id, response}]}``, system instructions in ``system``;
* OpenAI chat completions (the OpenAI instrumentations, LiteLLM, the demo's agent):
  ``{role, content (text or blocks), tool_calls: [{id, function: {name, arguments}}],
  tool_call_id}``, sometimes wrapped as ``{message: {...}}``;
* LangChain: ``{role, content, toolCalls: [{id, name, arguments}], toolCallId}``, or a text
  completion's ``prompts``.

Answers: the raw response's ``outputMessages`` (GenAI), ``choices[].message`` (OpenAI),
``generations`` (LangChain) or the demo's ``toolCall``; else the node's output text. Whatever
is not understood is left to the raw JSON beside it, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: Any


@dataclass
class Message:
    role: str
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    #: for a tool result: the call it answers, and what it returned
    answers: str | None = None
    result: Any = None


def _text_of(content: Any) -> str:
    """Text of a ``content``: a string, or the text of its blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, dict) and block.get("type") in (None, "text", "output_text"):
                value = block.get("text", block.get("content"))
                if isinstance(value, str):
                    texts.append(value)
        return "\n".join(texts)
    return orjson.dumps(content).decode()


def _arguments(value: Any) -> Any:
    """Tool-call arguments as data: OpenAI sends them as JSON text."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _call(raw: Any) -> ToolCall | None:
    if not isinstance(raw, dict):
        return None
    function: dict[str, Any] = raw["function"] if isinstance(raw.get("function"), dict) else raw
    name = function.get("name")
    if not isinstance(name, str):
        return None
    arguments = function.get("arguments", function.get("args"))
    return ToolCall(str(raw.get("id") or ""), name, _arguments(arguments))


#: LangChain's message types under the roles the other forms use
_ROLES = {"human": "user", "ai": "assistant"}


def message(raw: Any) -> Message | None:
    """One message in any of the recorded forms; None when it is not a message."""
    found = _message(raw)
    if found is not None:
        found.role = _ROLES.get(found.role, found.role)
    return found


def _message(raw: Any) -> Message | None:
    if isinstance(raw, str):
        return Message("user", raw)
    if not isinstance(raw, dict):
        return None
    if isinstance(raw.get("message"), dict):  # an OpenAI choice or event wrapper
        inner = _message(raw["message"])
        if inner is not None and raw.get("role") and inner.role == "?":
            inner.role = str(raw["role"])
        return inner
    role = str(raw.get("role") or raw.get("type") or "?")
    found = Message(role)
    parts = raw.get("parts")
    if isinstance(parts, list):
        texts = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("content"), str):
                texts.append(part["content"])
            elif kind == "tool_call":
                call = _call(part)
                if call is not None:
                    found.tool_calls.append(call)
            elif kind == "tool_call_response":
                found.answers = str(part.get("id") or "")
                found.result = part.get("response")
        found.text = "\n".join(texts)
        return found
    found.text = _text_of(raw.get("content"))
    for key in ("tool_calls", "toolCalls"):
        for call in raw.get(key) or ():
            parsed = _call(call)
            if parsed is not None:
                found.tool_calls.append(parsed)
    answered = raw.get("tool_call_id", raw.get("toolCallId"))
    if answered is not None or role == "tool":
        found.answers = str(answered or "")
        found.result, found.text = found.text, ""
    return found


def _messages(items: Any) -> list[Message]:
    if not isinstance(items, list):
        return []
    return [m for m in (message(item) for item in items) if m is not None]


def prompt_messages(prompt: Any) -> list[Message]:
    """The messages a MODEL_REQUEST prompt sent, system instructions first."""
    if isinstance(prompt, list):
        return _messages(prompt)
    if not isinstance(prompt, dict):
        return [Message("user", _text_of(prompt))] if prompt else []
    found: list[Message] = []
    system = prompt.get("system")
    if system:
        texts = _messages(system) if isinstance(system, list) else []
        text = "\n".join(m.text for m in texts) if texts else _text_of(system)
        found.append(Message("system", text))
    found += _messages(prompt.get("messages"))
    found += [Message("user", p) for p in prompt.get("prompts") or () if isinstance(p, str)]
    return found


def answer_messages(raw: Any, output_text: str) -> list[Message]:
    """What the model answered: from its raw response where it holds messages, else the
    node's output text."""
    found: list[Message] = []
    if isinstance(raw, dict):
        found = _messages(raw.get("outputMessages"))
        if not found:
            found = _messages(raw.get("choices"))
        if not found:
            found = _messages(raw.get("generations"))
        if not found and isinstance(raw.get("toolCall"), dict):
            call = _call(raw["toolCall"])
            found = [Message("assistant", output_text, [call] if call else [])]
    for item in found:
        if item.role == "?":
            item.role = "assistant"
    if not found and output_text:
        found = [Message("assistant", output_text)]
    return found
