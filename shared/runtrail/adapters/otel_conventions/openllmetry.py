"""OpenLLMetry (traceloop) spans read as OTel GenAI ones.

Why: traceloop's instrumentations and SDK spell a model call as flattened, indexed attributes
(``gen_ai.prompt.N.role``, ``gen_ai.completion.N.tool_calls.M.arguments``, ``llm.usage.*``,
``llm.request.type``) and the agent's own structure as ``traceloop.span.kind`` spans
(workflow, agent, task, tool) with ``traceloop.entity.*``. Read as they are, the tool calls are
lost and the spans of the SDK are "not GenAI". :data:`TABLE` says, once, which GenAI attribute
each becomes; :func:`as_genai` applies it. Releases that already write
``gen_ai.input.messages``/``gen_ai.output.messages`` are left alone (:func:`claims`), though
their ``traceloop.span.kind`` spans still need this module: they are the SDK's, not the
instrumentation's.

Values keep their types: text stays text. Only what the convention writes as JSON text is
parsed: tool-call ``arguments``, ``traceloop.entity.input``/``output``, function
``parameters``, and a message ``content`` holding a JSON list of typed content blocks (the
instrumentation's form of a multi-part message).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from runtrail.adapters.otel_conventions import json_text
from runtrail.adapters.otel_spans import SpanView

NAME = "openllmetry"

KIND = "traceloop.span.kind"
#: attributes of the current GenAI convention: a span carrying them is read as it is
_CURRENT = ("gen_ai.input.messages", "gen_ai.output.messages")
_INDEXED = re.compile(r"^(gen_ai\.prompt|gen_ai\.completion|llm\.request\.functions)\.(\d+)\.(.+)$")
_CLAIMING = re.compile(r"^gen_ai\.(prompt|completion)\.\d+\.")
_TOOL_CALL = re.compile(r"^tool_calls\.(\d+)\.(id|name|arguments)$")


@dataclass(frozen=True)
class Row:
    """One OpenLLMetry attribute (``.N``: an index, ``.*``: its fields) and what it becomes."""

    source: str
    target: str
    #: how the value is read: a key of :data:`_READERS`
    read: str = "same"
    #: only on spans of this ``traceloop.span.kind``
    kind: str | None = None
    #: values renamed on the way (others are kept as they are)
    values: Mapping[str, str] = field(default_factory=dict)


#: every OpenLLMetry attribute read, in order: the first row to give a GenAI attribute a value
#: wins, and a GenAI attribute the span already has is never overwritten
TABLE: tuple[Row, ...] = (
    Row(
        "llm.request.type",
        "gen_ai.operation.name",
        values={"chat": "chat", "completion": "text_completion"},
    ),
    Row(
        KIND,
        "gen_ai.operation.name",
        values={"workflow": "invoke_agent", "agent": "invoke_agent", "tool": "execute_tool"},
    ),
    Row("gen_ai.prompt.N.*", "gen_ai.input.messages", "messages"),
    Row("gen_ai.completion.N.*", "gen_ai.output.messages", "messages"),
    Row("gen_ai.completion.N.finish_reason", "gen_ai.response.finish_reasons", "each"),
    Row("llm.request.functions.N.*", "gen_ai.tool.definitions", "functions"),
    Row("gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens"),
    Row("llm.usage.prompt_tokens", "gen_ai.usage.input_tokens"),
    Row("gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens"),
    Row("llm.usage.completion_tokens", "gen_ai.usage.output_tokens"),
    Row("llm.frequency_penalty", "gen_ai.request.frequency_penalty"),
    Row("llm.presence_penalty", "gen_ai.request.presence_penalty"),
    Row("llm.top_k", "gen_ai.request.top_k"),
    Row("llm.chat.stop_sequences", "gen_ai.request.stop_sequences"),
    Row("traceloop.entity.name", "gen_ai.agent.name", kind="workflow"),
    Row("traceloop.entity.name", "gen_ai.agent.name", kind="agent"),
    Row("traceloop.entity.name", "gen_ai.tool.name", kind="tool"),
    Row("traceloop.entity.input", "gen_ai.tool.call.arguments", "arguments", kind="tool"),
    Row("traceloop.entity.output", "gen_ai.tool.call.result", "json", kind="tool"),
)


def claims(span: SpanView) -> bool:
    """An OpenLLMetry span not already written in the current GenAI convention."""
    attrs = span.attributes
    if any(key in attrs for key in _CURRENT):
        return False
    return (
        KIND in attrs or "llm.request.type" in attrs or any(_CLAIMING.match(key) for key in attrs)
    )


def as_genai(span: SpanView) -> SpanView:
    """``span`` with the GenAI attributes :data:`TABLE` gives it (its own attributes kept)."""
    attrs = dict(span.attributes)
    indexed = _indexed(span.attributes)
    kind = span.attributes.get(KIND)
    for row in TABLE:
        if row.target in attrs or (row.kind is not None and row.kind != kind):
            continue
        value = _READERS[row.read](row, span.attributes, indexed)
        if value is not None:
            attrs[row.target] = value
    return replace(span, attributes=attrs)


# --- reading the values -----------------------------------------------------------------------
#: prefix → index → the fields under it (``role``, ``tool_calls.0.id``, …)
_Indexed = dict[str, dict[int, dict[str, Any]]]


def _indexed(attrs: Mapping[str, Any]) -> _Indexed:
    out: _Indexed = {}
    for key, value in attrs.items():
        match = _INDEXED.match(key)
        if match:
            prefix, index, rest = match.groups()
            out.setdefault(prefix, {}).setdefault(int(index), {})[rest] = value
    return out


def _prefix(row: Row) -> str:
    return row.source.split(".N", 1)[0]


def _same(row: Row, attrs: Mapping[str, Any], indexed: _Indexed) -> Any:
    value = attrs.get(row.source)
    if isinstance(value, str):
        return row.values.get(value, value)
    return list(value) if isinstance(value, tuple) else value


def _each(row: Row, attrs: Mapping[str, Any], indexed: _Indexed) -> list[Any] | None:
    """One field of every indexed item, in index order: ``finish_reason`` of each choice."""
    field_name = row.source.rsplit(".", 1)[1]
    items = indexed.get(_prefix(row), {})
    values = [items[i][field_name] for i in sorted(items) if items[i].get(field_name)]
    return values or None


def _parsed(row: Row, attrs: Mapping[str, Any], indexed: _Indexed) -> Any:
    return json_text(attrs.get(row.source))


def _arguments(row: Row, attrs: Mapping[str, Any], indexed: _Indexed) -> Any:
    """``traceloop.entity.input`` is ``{"args": [...], "kwargs": {...}}``: a tool called with
    keywords only has those as its arguments."""
    value = json_text(attrs.get(row.source))
    if isinstance(value, dict) and set(value) == {"args", "kwargs"} and not value["args"]:
        return value["kwargs"]
    return value


def _tool_calls(fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls: dict[int, dict[str, Any]] = {}
    for key, value in fields.items():
        match = _TOOL_CALL.match(key)
        if match:
            calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
    if "function_call.name" in fields:
        calls.setdefault(len(calls), {}).update(
            name=fields["function_call.name"], arguments=fields.get("function_call.arguments")
        )
    parts = []
    for index in sorted(calls):
        call = calls[index]
        part: dict[str, Any] = {"type": "tool_call"}
        if call.get("id") is not None:
            part["id"] = call["id"]
        part["name"] = call.get("name")
        part["arguments"] = json_text(call.get("arguments"))
        parts.append(part)
    return parts


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """Text as a text part; a JSON list of typed content blocks as their parts."""
    if content is None:
        return []
    if isinstance(content, str) and content.startswith("["):
        blocks = json_text(content)
        if isinstance(blocks, list) and all(isinstance(b, dict) and "type" in b for b in blocks):
            return [
                {"type": "text", "content": b.get("text")} if b["type"] == "text" else b
                for b in blocks
            ]
    return [{"type": "text", "content": content}]


def _message(fields: Mapping[str, Any], default_role: str | None) -> dict[str, Any]:
    role = fields.get("role", default_role)
    parts: list[dict[str, Any]]
    if role == "tool":
        parts = [
            {
                "type": "tool_call_response",
                "id": fields.get("tool_call_id"),
                "response": fields.get("content"),
            }
        ]
    else:
        parts = _content_parts(fields.get("content"))
    if fields.get("refusal") is not None:
        parts.append({"type": "refusal", "content": fields["refusal"]})
    parts += _tool_calls(fields)
    message: dict[str, Any] = {"role": role, "parts": parts}
    if fields.get("finish_reason"):
        message["finish_reason"] = fields["finish_reason"]
    return message


def _messages(row: Row, attrs: Mapping[str, Any], indexed: _Indexed) -> list[Any] | None:
    items = indexed.get(_prefix(row), {})
    default_role = "assistant" if row.target == "gen_ai.output.messages" else None
    return [_message(items[i], default_role) for i in sorted(items)] or None


def _functions(row: Row, attrs: Mapping[str, Any], indexed: _Indexed) -> list[Any] | None:
    items = indexed.get(_prefix(row), {})
    tools = [
        {
            "type": "function",
            "name": items[i].get("name"),
            "description": items[i].get("description"),
            "parameters": json_text(items[i].get("parameters")),
        }
        for i in sorted(items)
    ]
    return tools or None


_READERS: dict[str, Callable[[Row, Mapping[str, Any], _Indexed], Any]] = {
    "same": _same,
    "each": _each,
    "json": _parsed,
    "arguments": _arguments,
    "messages": _messages,
    "functions": _functions,
}
