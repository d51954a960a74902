"""Node replay (seed 000 §2): rebuild a captured result (mock) or re-invoke the node (live).

Mock replay never calls anything and is deterministic: it reproduces a past turn exactly.
Live replay is an explicit experiment (re-run a node, compare models); it calls the given
client once with the captured input, as captured. Records read back from JSONL or an object
store carry the prompt and the tool call as JSON, so they replay live as well as fresh ones.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from pydantic import ValidationError

from runtrail.capture.record import NodeIoRecord, NodeType
from runtrail.events.runtime_events import ToolCall
from runtrail.privacy.resolve import holds_erased

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class ReplayError(ValueError):
    """A record cannot be replayed the way asked (wrong node type, no captured input)."""


class NotAPromptError(ReplayError):
    """Live model replay needs the captured prompt, and this record has none."""


class ModelClient(Protocol[T_co]):
    """The user's model client: whatever it returns is the live replay's result."""

    def create(self, prompt: Any) -> T_co: ...


@dataclass(frozen=True, slots=True)
class MockModelResult:
    """A model result rebuilt from a record without calling the model."""

    #: The captured raw payload (``outputs``), or ``None`` when none was captured.
    raw: Any
    #: The captured text; a string ``outputs`` stands in when no text was accumulated.
    output_text: str
    reasoning_text: str
    input_tokens: int | None
    output_tokens: int | None
    #: Which captured field the result rests on: the raw payload first, else the text.
    source: Literal["outputs", "outputText"]


def _require(record: NodeIoRecord, node_type: NodeType) -> None:
    if record.node_type != node_type:
        raise ReplayError(
            f"record {record.record_id} is a {record.node_type} node, not a {node_type} node"
        )


def _not_erased(record: NodeIoRecord) -> None:
    """A live replay of erased input would call out with what is left of it: refused."""
    if holds_erased(record.inputs):
        raise ReplayError(
            f"the input of record {record.record_id} was erased (or is not resolved): a live "
            "replay would call with incomplete input; a mock replay shows what is left"
        )


def replay_model_mock(record: NodeIoRecord) -> MockModelResult:
    """Rebuild the model's result from ``outputs``, falling back to ``outputText``."""
    _require(record, "MODEL")
    outputs = record.outputs
    text = record.output_text
    if not text and isinstance(outputs, str):
        text = outputs
    return MockModelResult(
        raw=copy.deepcopy(outputs),
        output_text=text,
        reasoning_text=record.reasoning_text,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        source="outputs" if outputs is not None else "outputText",
    )


def replay_model_live(record: NodeIoRecord, model_client: ModelClient[T], prompt: Any = None) -> T:
    """Call ``model_client.create`` once with the captured prompt, as captured, or with
    ``prompt`` when the operator edited it (an experiment: what would this node answer?).

    The client gets a copy, so it cannot alter the record. Raises :class:`ReplayError` for a
    TOOL record and :class:`NotAPromptError` when no prompt was captured.
    """
    _require(record, "MODEL")
    if record.inputs is None:
        raise NotAPromptError(
            f"record {record.record_id} ({record.node_id}) has no captured prompt: its "
            "MODEL_REQUEST was never seen, so there is nothing to replay live"
        )
    _not_erased(record)
    return model_client.create(copy.deepcopy(record.inputs if prompt is None else prompt))


def replay_tool_live(record: NodeIoRecord, reinvoker: Callable[[ToolCall], T]) -> T:
    """Re-invoke a tool node: ``reinvoker`` maps the captured call to a fresh result.

    How a tool is re-bound (sandbox, stub, the real thing) is the caller's decision.
    """
    _require(record, "TOOL")
    if record.inputs is None:
        raise ReplayError(
            f"record {record.record_id} ({record.node_id}) has no captured tool call: its "
            "TOOL_RESULT arrived without a TOOL_CALL"
        )
    _not_erased(record)
    try:
        call = ToolCall.model_validate(record.inputs)
    except ValidationError as exc:
        raise ReplayError(f"record {record.record_id}: inputs is not a tool call: {exc}") from exc
    return reinvoker(call)
