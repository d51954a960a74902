"""``runtrail.adapters.json_form.jsonable``: the one converter of framework objects to event JSON
that the LangChain and OpenAI Agents adapters share (each with its own depth, unset-field rule
and hook). Pure; no services needed."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from pydantic import BaseModel

from runtrail.adapters import langchain_json, openai_agents_map
from runtrail.adapters.json_form import UNHANDLED, jsonable


class Usage(BaseModel):
    input_tokens: int | None = None
    note: tuple[str, ...] = ()


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_every_kind_of_value_becomes_json() -> None:
    value = {
        1: (1.5, float("inf"), float("nan")),
        "set": {"a"},
        "bytes": b"caf\xc3\xa9\xff",
        "model": Usage(note=("x",)),
        "other": ValueError("boom"),
        "flags": [True, None, "s"],
    }
    assert jsonable(value, max_depth=8) == {
        "1": [1.5, "inf", "nan"],
        "set": ["a"],
        "bytes": "café\ufffd",
        "model": {"input_tokens": None, "note": ["x"]},
        "other": "boom",
        "flags": [True, None, "s"],
    }
    assert jsonable(Usage(), max_depth=8, exclude_none=True) == {"note": []}


def test_values_nested_past_the_depth_become_strings() -> None:
    assert jsonable(nested(4), max_depth=3) == [[["['leaf']"]]]
    assert jsonable(nested(4), max_depth=4) == nested(4)
    # each adapter keeps its own bound: LangChain 65 levels of containers, the OpenAI Agents SDK 32
    assert langchain_json.jsonable(nested(65)) == nested(65)
    assert langchain_json.jsonable(nested(66)) != nested(66)
    assert openai_agents_map.jsonable(nested(32)) == nested(32)
    assert openai_agents_map.jsonable(nested(33)) != nested(33)


def test_a_hook_converts_a_frameworks_own_types_at_any_depth() -> None:
    def shout(value: Any) -> Any:
        return value.upper() if isinstance(value, bytes) else UNHANDLED

    assert jsonable({"k": [b"ab", (b"c",)]}, max_depth=8, special=shout) == {"k": [b"AB", [b"C"]]}
    # LangChain's: a message anywhere is its prompt form (role, content, tool calls)
    call = {"name": "add", "args": {"a": 1}, "id": "c1"}
    value = {"history": [HumanMessage("hi"), AIMessage("", tool_calls=[call])]}
    assert langchain_json.jsonable(value) == {
        "history": [
            {"role": "human", "content": "hi"},
            {
                "role": "ai",
                "content": "",
                "toolCalls": [{"id": "c1", "name": "add", "arguments": {"a": 1}}],
            },
        ]
    }
    # the OpenAI Agents SDK's: pydantic models without their unset fields
    assert openai_agents_map.jsonable([Usage(input_tokens=3)]) == [{"input_tokens": 3, "note": []}]
