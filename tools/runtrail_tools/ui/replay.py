"""Replay one node from the page (seed 000 §2, §7): mock replay inline, live replay only when
a model client is configured and the operator presses the button, with a side-by-side diff of
the output text, the tool calls and the token counts. A live replay may send an edited prompt
and edited parameters: the record itself is never changed.

The CLI's ``replay node`` functions are used as they are (``original_result``, ``make``), so a
page and ``runtrail replay node`` can never give two answers for one record.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import orjson

from runtrail.capture.record import NodeIoRecord
from runtrail.capture.replay import ReplayError, replay_model_live
from runtrail_tools.cli.capture_cmd import make, original_result, to_json
from runtrail_tools.ui.chat import answer_messages

#: The keys of a captured prompt that are the conversation; every other key is a parameter
#: (model, temperature, tools, …), edited apart from it.
PROMPT_KEYS = ("messages", "system", "prompts", "input")


@dataclass(frozen=True)
class DiffRow:
    left: str
    right: str
    #: ``same``, ``changed``, ``removed`` (left only) or ``added`` (right only).
    kind: str


def text_of(result: Any) -> str:
    """The comparable text of a model result: its output text, else its JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        for name in ("outputText", "output_text", "text", "content", "message"):
            value = result.get(name)
            if isinstance(value, str):
                return value
    for name in ("output_text", "text", "content"):
        value = getattr(result, name, None)
        if isinstance(value, str):
            return value
    return to_json(result)


def side_by_side(left: str, right: str) -> list[DiffRow]:
    """Line-aligned rows of two texts (difflib opcodes), for two columns."""
    a, b = left.splitlines() or [""], right.splitlines() or [""]
    rows: list[DiffRow] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(DiffRow(x, x, "same") for x in a[i1:i2])
            continue
        lefts, rights = a[i1:i2], b[j1:j2]
        for k in range(max(len(lefts), len(rights))):
            lt = lefts[k] if k < len(lefts) else ""
            rt = rights[k] if k < len(rights) else ""
            kind = (
                "changed"
                if k < len(lefts) and k < len(rights)
                else ("removed" if k < len(lefts) else "added")
            )
            rows.append(DiffRow(lt, rt, kind))
    return rows


@dataclass
class Facets:
    """What a replay diff compares of one model result."""

    text: str = ""
    tool_calls: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None


def _first(layers: list[dict[str, Any]], names: tuple[str, ...]) -> Any:
    for layer in layers:
        for name in names:
            if layer.get(name) is not None:
                return layer[name]
    return None


def _tokens(layers: list[dict[str, Any]], names: tuple[str, ...]) -> int | None:
    usages = [u for u in (layer.get("usage") for layer in layers) if isinstance(u, dict)]
    found = _first(layers + usages, names)
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def facets(result: Any) -> Facets:
    """Text, tool calls and tokens of a model result in any recorded form: the captured
    result (``outputText``, ``raw``, ``inputTokens``), a ``ModelResult`` (``message``,
    ``raw``), an OpenAI response (``choices``, ``usage``) or a plain dict."""
    plain = orjson.loads(to_json(result))
    if not isinstance(plain, dict):
        return Facets(text=text_of(plain))
    layers = [plain] + ([plain["raw"]] if isinstance(plain.get("raw"), dict) else [])
    found = _first(layers, ("outputText", "output_text", "text", "message", "content"))
    text = found if isinstance(found, str) else ""
    calls, said = [], []
    for layer in layers:
        for message in answer_messages(layer, ""):
            calls += message.tool_calls
            said += [message.text] if message.text else []
        for key in ("toolCalls", "tool_calls"):
            listed = layer.get(key)
            for item in listed if isinstance(listed, list) else ():
                calls += [c for m in answer_messages({"toolCall": item}, "") for c in m.tool_calls]
    text = text or "\n".join(said)
    return Facets(
        text=text if text or calls else text_of(plain),
        tool_calls=[
            f"{c.name}({orjson.dumps(c.arguments, option=orjson.OPT_SORT_KEYS).decode()})"
            for c in calls
        ],
        input_tokens=_tokens(layers, ("inputTokens", "input_tokens", "prompt_tokens")),
        output_tokens=_tokens(layers, ("outputTokens", "output_tokens", "completion_tokens")),
    )


def token_rows(left: Facets, right: Facets) -> list[DiffRow]:
    rows = []
    for name, a, b in (
        ("input", left.input_tokens, right.input_tokens),
        ("output", left.output_tokens, right.output_tokens),
    ):
        shown = (f"{name} {'?' if a is None else a}", f"{name} {'?' if b is None else b}")
        rows.append(DiffRow(*shown, "same" if a == b else "changed"))
    return rows


def editable(record: NodeIoRecord) -> dict[str, Any]:
    """The captured prompt split for editing: the conversation, and the parameters."""
    inputs = record.inputs
    if not isinstance(inputs, dict):
        return {"prompt": inputs, "parameters": {}}
    return {
        "prompt": {k: v for k, v in inputs.items() if k in PROMPT_KEYS},
        "parameters": {k: v for k, v in inputs.items() if k not in PROMPT_KEYS},
    }


def edited_prompt(edit: Any) -> Any:
    """The prompt a live replay sends: the edited conversation with the edited parameters
    (``{"prompt": …, "parameters": {…}}``, both as :func:`editable` gives them)."""
    if not isinstance(edit, dict) or "prompt" not in edit:
        raise ReplayError('an edited replay sends {"prompt": …, "parameters": {…}}')
    prompt, parameters = edit["prompt"], edit.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ReplayError("the parameters are a JSON object")
    if not parameters:
        return prompt
    if not isinstance(prompt, dict):
        raise ReplayError("parameters go with a prompt that is a JSON object")
    return {**prompt, **parameters}


def mock(record: NodeIoRecord) -> dict[str, Any]:
    """The node's captured result, rebuilt without calling anything."""
    return {"recordId": record.record_id, "mode": "mock", "result": original_result(record)}


def live(record: NodeIoRecord, model_client: str, edit: Any = None) -> dict[str, Any]:
    """One real call of the configured client with the captured prompt (or the operator's
    edit of it), and the diff of its output, tool calls and tokens against the captured."""
    client = make(model_client, "--model-client", "a MODEL node")
    prompt = None if edit is None else edited_prompt(edit)
    fresh = replay_model_live(record, client, prompt)
    original = original_result(record)
    left, right = facets(original), facets(fresh)
    return {
        "recordId": record.record_id,
        "mode": "live",
        "edited": edit is not None,
        "original": original,
        "live": fresh,
        "diff": [row.__dict__ for row in side_by_side(left.text, right.text)],
        "toolCalls": [
            row.__dict__
            for row in side_by_side("\n".join(left.tool_calls), "\n".join(right.tool_calls))
            if row.left or row.right
        ],
        "tokens": [row.__dict__ for row in token_rows(left, right)],
    }
