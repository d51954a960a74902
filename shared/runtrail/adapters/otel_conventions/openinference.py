"""OpenInference spans (``openinference-instrumentation-*``, Arize Phoenix) read as GenAI ones.

OpenInference says what a span is with ``openinference.span.kind`` and flattens messages into
indexed attributes (``llm.input_messages.0.message.role``). :data:`TABLE` is the whole
translation: each row names an OpenInference attribute, the GenAI attribute it becomes and how
its value is read; docs/ADAPTERS.md ("OpenInference") is the same table with the event fields.

Values keep their types. Only text OpenInference documents as JSON is parsed
(``llm.invocation_parameters``, ``llm.tools.N.tool.json_schema``,
``tool_call.function.arguments``, ``tool.parameters``, and ``input.value``/``output.value``
when their ``*.mime_type`` is ``application/json``); every value written here is final, so the
translated span marks it :attr:`~runtrail.adapters.otel_spans.SpanView.verbatim` and the mapping
never parses a text result that happens to look like JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from runtrail.adapters.otel_conventions import json_text
from runtrail.adapters.otel_spans import SpanView
from runtrail.whole_numbers import whole_number

NAME = "openinference"
KIND = "openinference.span.kind"

#: ``openinference.span.kind`` → ``gen_ai.operation.name``; a kind not here is not GenAI.
#: RETRIEVER, RERANKER, GUARDRAIL, EVALUATOR get names the mapping counts as
#: ``unmapped-operation:<name>`` (no runtime event, never dropped unseen).
OPERATIONS: Mapping[str, str] = {
    "LLM": "chat",
    "TOOL": "execute_tool",
    "AGENT": "invoke_agent",
    "CHAIN": "invoke_agent",
    "EMBEDDING": "embeddings",
    "RETRIEVER": "retrieval",
    "RERANKER": "rerank",
    "GUARDRAIL": "guardrail",
    "EVALUATOR": "evaluate",
}
#: kinds that are an agent only as a trace's root or as the span model/tool spans hang under
TURN_ONLY = frozenset({"CHAIN"})

#: ``llm.invocation_parameters`` key → ``gen_ai.request.<name>`` (the model as a last resort)
PARAMETERS: Mapping[str, str] = {
    "model": "model",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "stop": "stop_sequences",
    "seed": "seed",
    "n": "choice.count",
}

_JSON_MIME = "application/json"


class _Attributes:
    """The span's attributes being read; each JSON text parsed at most once."""

    def __init__(self, attributes: Mapping[str, Any]) -> None:
        self.raw = attributes
        self._parsed: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.raw.get(key)

    def json(self, key: str) -> Any:
        if key not in self._parsed:
            self._parsed[key] = json_text(self.raw.get(key))
        return self._parsed[key]

    def io(self, key: str) -> Any:
        """``input.value``/``output.value``: parsed only when its mime type says JSON."""
        mime = self.raw.get(key.rsplit(".", 1)[0] + ".mime_type")
        return self.json(key) if mime == _JSON_MIME else self.raw.get(key)


Read = Callable[[_Attributes, str], Any]


def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``<prefix>.N.<rest>`` attributes: one ``{rest: value}`` per N, in N's order."""
    head = prefix + "."
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(head):
            index, _, rest = key[len(head) :].partition(".")
            number = whole_number(index)
            if number is not None and rest:
                groups.setdefault(number, {})[rest] = value
    return [groups[i] for i in sorted(groups)]


# --- how a row's value is read ----------------------------------------------------------------
def _as_is(attrs: _Attributes, key: str) -> Any:
    return attrs.get(key)


def _json(attrs: _Attributes, key: str) -> Any:
    return attrs.json(key)


def _io(attrs: _Attributes, key: str) -> Any:
    return attrs.io(key)


def _listed(attrs: _Attributes, key: str) -> Any:
    value = attrs.get(key)
    return [value] if isinstance(value, str) else value


def _parameter(name: str) -> Read:
    def read(attrs: _Attributes, key: str) -> Any:
        parameters = attrs.json(key)
        return parameters.get(name) if isinstance(parameters, dict) else None

    return read


def _response(name: str) -> Read:
    """A field of the provider's response body (``output.value`` as JSON: its id, its model)."""

    def read(attrs: _Attributes, key: str) -> Any:
        body = attrs.io(key)
        value = body.get(name) if isinstance(body, dict) else None
        return value if isinstance(value, str) else None

    return read


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    part = {
        "type": "tool_call",
        "id": call.get("tool_call.id"),
        "name": call.get("tool_call.function.name"),
        "arguments": json_text(call.get("tool_call.function.arguments")),
    }
    return {k: v for k, v in part.items() if v is not None}


def _content(content: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = content.get("message_content.type")
    if kind == "text":
        return {"type": "text", "content": content.get("message_content.text")}
    url = content.get("message_content.image.image.url")
    if kind == "image" and url is not None:
        return {"type": "uri", "modality": "image", "uri": url}
    return None


def _message(fields: Mapping[str, Any], finish_reason: Any) -> dict[str, Any]:
    """One flattened message as a GenAI message: its role and its parts, in the order given."""
    content = fields.get("message.content")
    call_id = fields.get("message.tool_call_id")
    parts: list[dict[str, Any]] = []
    if call_id is not None:  # a tool's answer
        parts.append({"type": "tool_call_response", "id": call_id, "response": content})
    elif content is not None:
        parts.append({"type": "text", "content": content})
    parts += [p for c in _indexed(fields, "message.contents") if (p := _content(c)) is not None]
    parts += [_tool_call(call) for call in _indexed(fields, "message.tool_calls")]
    message: dict[str, Any] = {"role": fields.get("message.role"), "parts": parts}
    if fields.get("message.name") is not None:
        message["name"] = fields["message.name"]
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return message


def _messages(attrs: _Attributes, key: str) -> Any:
    finish = attrs.get("llm.finish_reason") if key == "llm.output_messages" else None
    messages = [_message(fields, finish) for fields in _indexed(attrs.raw, key)]
    return messages or None


def _tools(attrs: _Attributes, key: str) -> Any:
    """``llm.tools.N.tool.json_schema``: each tool's definition as the provider was sent it."""
    tools = [json_text(t.get("tool.json_schema")) for t in _indexed(attrs.raw, key)]
    return [t for t in tools if t is not None] or attrs.json(key)


#: (OpenInference attribute, GenAI attribute, how its value is read, span kinds it applies to:
#: ``None`` for all). Per GenAI attribute the first row with a value wins; an attribute the span
#: already carries in GenAI terms is kept.
TABLE: tuple[tuple[str, str, Read, frozenset[str] | None], ...] = (
    ("llm.request.model_name", "gen_ai.request.model", _as_is, None),
    ("llm.model_name", "gen_ai.request.model", _as_is, None),
    ("embedding.model_name", "gen_ai.request.model", _as_is, None),
    ("reranker.model_name", "gen_ai.request.model", _as_is, None),
    *(
        ("llm.invocation_parameters", f"gen_ai.request.{genai}", _parameter(name), None)
        for name, genai in PARAMETERS.items()
    ),
    ("llm.provider", "gen_ai.provider.name", _as_is, None),
    ("llm.system", "gen_ai.system", _as_is, None),
    ("session.id", "gen_ai.conversation.id", _as_is, None),
    ("agent.name", "gen_ai.agent.name", _as_is, None),
    ("llm.input_messages", "gen_ai.input.messages", _messages, None),
    ("llm.tools", "gen_ai.tool.definitions", _tools, None),
    ("llm.output_messages", "gen_ai.output.messages", _messages, None),
    ("llm.response.model_name", "gen_ai.response.model", _as_is, None),
    ("output.value", "gen_ai.response.model", _response("model"), frozenset({"LLM"})),
    ("output.value", "gen_ai.response.id", _response("id"), frozenset({"LLM"})),
    ("llm.finish_reason", "gen_ai.response.finish_reasons", _listed, None),
    ("llm.token_count.prompt", "gen_ai.usage.input_tokens", _as_is, None),
    ("llm.token_count.completion", "gen_ai.usage.output_tokens", _as_is, None),
    ("tool.name", "gen_ai.tool.name", _as_is, None),
    ("tool.description", "gen_ai.tool.description", _as_is, None),
    ("tool.id", "gen_ai.tool.call.id", _as_is, None),
    ("tool_call.id", "gen_ai.tool.call.id", _as_is, None),
    ("input.value", "gen_ai.tool.call.arguments", _io, frozenset({"TOOL"})),
    ("tool.parameters", "gen_ai.tool.call.arguments", _json, frozenset({"TOOL"})),
    ("output.value", "gen_ai.tool.call.result", _io, frozenset({"TOOL"})),
)


def claims(span: SpanView) -> bool:
    """An OpenInference span not already written in GenAI terms (OpenInference can add those
    itself: ``OPENINFERENCE_ENABLE_GENAI_SEMCONV``)."""
    return KIND in span.attributes and "gen_ai.operation.name" not in span.attributes


def as_genai(span: SpanView) -> SpanView:
    """``span`` with the GenAI attributes :data:`TABLE` gives it (its own attributes kept)."""
    kind = str(span.attributes.get(KIND) or "").upper()
    attrs = _Attributes(span.attributes)
    out = dict(span.attributes)
    written: set[str] = set()
    operation = OPERATIONS.get(kind)
    if operation is not None:
        out["gen_ai.operation.name"] = operation
    for source, target, read, kinds in TABLE:
        if target in out or (kinds is not None and kind not in kinds):
            continue
        value = read(attrs, source)
        if value is not None:
            out[target] = value
            written.add(target)
    return replace(
        span,
        attributes=out,
        verbatim=span.verbatim | written,
        turn_only=kind in TURN_ONLY,
    )
