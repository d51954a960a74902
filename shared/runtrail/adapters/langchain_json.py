"""LangChain objects as the JSON that runtrail events carry (messages, prompts, responses).

One shape for both the callback handler and the resumable wrappers, because the resume cache
keys a model call by its prompt: the prompt must be the same bytes in every life of a run. So
message IDs (LangGraph gives each new message a random one), response metadata and run IDs are
left out; role, content, tool calls and the call's parameters are kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult, LLMResult

from runtrail.adapters import json_form
from runtrail.adapters.json_form import UNHANDLED

JsonDict = dict[str, Any]

#: Invocation parameters that describe the client, not the call (they never change a result).
_NOT_PARAMETERS = frozenset({"_type", "stream", "streaming", "callbacks"})


#: How deep LangChain values are followed (deeper ones become strings).
_MAX_DEPTH = 65


def _message(value: Any) -> Any:
    return message_json(value) if isinstance(value, BaseMessage) else UNHANDLED


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON (:func:`runtrail.adapters.json_form.jsonable`); a LangChain
    message in the shape of :func:`message_json`."""
    return json_form.jsonable(value, max_depth=_MAX_DEPTH, special=_message)


def message_json(message: BaseMessage) -> JsonDict:
    """Role, content, and what makes the message what it is (tool calls, the call answered)."""
    form: JsonDict = {"role": message.type, "content": jsonable(message.content)}
    if message.name:
        form["name"] = message.name
    if isinstance(message, AIMessage) and message.tool_calls:
        form["toolCalls"] = [
            {"id": c.get("id"), "name": c["name"], "arguments": jsonable(c["args"])}
            for c in message.tool_calls
        ]
    if isinstance(message, ToolMessage):
        form["toolCallId"] = message.tool_call_id
        if message.status != "success":
            form["status"] = message.status
    return form


def message_text(message: BaseMessage) -> str:
    """The message's text (content blocks joined), as capture's ``outputText`` wants it."""
    return message.text if isinstance(message.text, str) else str(message.text)


def model_name(params: Mapping[str, Any], metadata: Mapping[str, Any] | None, fallback: str) -> str:
    """The model a call names: its ``model`` parameter, LangSmith's ``ls_model_name``, else the
    client's type."""
    for key in ("model", "model_name", "model_id"):
        name = params.get(key)
        if isinstance(name, str) and name:
            return name
    name = (metadata or {}).get("ls_model_name")
    if isinstance(name, str) and name:
        return name
    kind = params.get("_type")
    return kind if isinstance(kind, str) and kind else fallback


def parameters(params: Mapping[str, Any]) -> JsonDict:
    """The invocation parameters that shape the answer (sorted by JSON canonicalisation later)."""
    return {
        k: jsonable(v)
        for k, v in params.items()
        if k not in _NOT_PARAMETERS and not k.startswith("model") and v is not None
    }


def chat_prompt(model: str, messages: Sequence[BaseMessage], params: Mapping[str, Any]) -> JsonDict:
    """The MODEL_REQUEST prompt of a chat call (and its resume-cache content key)."""
    return {
        "model": model,
        "messages": [message_json(m) for m in messages],
        "parameters": parameters(params),
    }


def text_prompt(model: str, prompts: Sequence[str], params: Mapping[str, Any]) -> JsonDict:
    """The MODEL_REQUEST prompt of a completion (non-chat) call."""
    return {"model": model, "prompts": list(prompts), "parameters": parameters(params)}


def _generations(result: LLMResult | ChatResult) -> list[Any]:
    """Every generation, flat (an LLMResult nests them per prompt, a ChatResult does not)."""
    rows: list[Any] = list(result.generations)
    return [g for row in rows for g in row] if rows and isinstance(rows[0], list) else rows


def token_text(token: Any) -> str:
    """A streamed token as text (newer models stream content blocks, not strings)."""
    if isinstance(token, str):
        return token
    parts = [b if isinstance(b, str) else str(b.get("text", "")) for b in token or ()]
    return "".join(parts)


def response_raw(result: LLMResult | ChatResult) -> JsonDict:
    """The final MODEL_RESPONSE ``raw``: every generation, usage (where capture reads token
    counts) and the provider's ``llm_output``."""
    flat = _generations(result)
    generations: list[Any] = []
    usage: Any = None
    for generation in flat:
        message = getattr(generation, "message", None)
        if isinstance(message, BaseMessage):
            generations.append(message_json(message))
            if isinstance(message, AIMessage) and message.usage_metadata and usage is None:
                usage = jsonable(message.usage_metadata)
        else:
            generations.append({"text": generation.text})
    raw: JsonDict = {"generations": generations}
    if usage is not None:
        raw["usage"] = usage
    output = result.llm_output
    if output:
        raw["llmOutput"] = jsonable(output)
        if usage is None and isinstance(output.get("token_usage"), Mapping):
            raw["usage"] = jsonable(output["token_usage"])
    return raw


def response_text(result: LLMResult | ChatResult) -> str:
    """The text of the first generation (what capture's ``outputText`` shows)."""
    flat = _generations(result)
    if not flat:
        return ""
    message = getattr(flat[0], "message", None)
    return message_text(message) if isinstance(message, BaseMessage) else flat[0].text


def tool_output(output: Any) -> Any:
    """A tool's result as TOOL_RESULT ``output``: a ToolMessage's content (and artifact)."""
    if isinstance(output, ToolMessage):
        if output.artifact is not None:
            return {"content": jsonable(output.content), "artifact": jsonable(output.artifact)}
        return jsonable(output.content)
    return jsonable(output)
