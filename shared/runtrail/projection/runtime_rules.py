"""Handlers of the runtime events of seed 000: node counts, retries and best-effort tokens.

A model node is keyed ``turnId|step`` (the capture pairing key within a run): the first
MODEL_REQUEST or MODEL_RESPONSE of a key opens and counts it, STEP_END closes it, retries in
the step stay in the same node. A tool node is counted at each TOOL_RESULT (paired or not),
as capture flushes it. Reasoning text is never projected (seed 002: no hidden reasoning).

Runtime tokens follow seed 000's rule per node: for each slot the latest raw response that
reports it wins, so a stream whose chunks repeat cumulative usage is not counted twice; the
run totals move by the difference whenever a node's latest count changes.
"""

from __future__ import annotations

from typing import Any

from runtrail.events import Event
from runtrail.events.runtime_events import (
    ModelReasoning,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    ModelRetryV1,
    StepEnd,
    ToolCall,
    ToolCallV1,
    ToolResult,
    ToolResultV1,
)
from runtrail.projection.model import LIVE, ModelNode, RunProjection, TokenTotals, updated
from runtrail.projection.rule import LIVE_NEEDS, Rule, Update, as_current
from runtrail.projection.usage import raw_usage


def _node_key(event: Event) -> str:
    return f"{event.turn_id or ''}|{'' if event.step is None else event.step}"


def _open_node(state: RunProjection, event: Event) -> tuple[ModelNode, Update]:
    """The model node of the event's key, opening (and counting) it if it is not the open one."""
    key = _node_key(event)
    node = state.open_model_node
    if node is not None and node.key == key:
        return node, {}
    node = ModelNode(key=key)
    return node, {"open_model_node": node, "model_nodes": state.model_nodes + 1}


def model_request(state: RunProjection, event: Event, data: ModelRequest) -> Update:
    return _open_node(state, event)[1]


def _is_empty(raw: Any) -> bool:
    return raw is None or raw == "" or raw == {} or raw == []


def model_response(state: RunProjection, event: Event, data: ModelResponse) -> Update:
    node, update = _open_node(state, event)
    if _is_empty(data.raw):
        return update
    seen_in, seen_out = raw_usage(data.raw)
    new_in = node.input_tokens if seen_in is None else seen_in
    new_out = node.output_tokens if seen_out is None else seen_out
    if (new_in, new_out) == (node.input_tokens, node.output_tokens):
        return update
    totals = state.runtime_tokens
    return {
        **update,
        "open_model_node": updated(node, {"input_tokens": new_in, "output_tokens": new_out}),
        "runtime_tokens": TokenTotals.of(
            totals.input_tokens + (new_in or 0) - (node.input_tokens or 0),
            totals.output_tokens + (new_out or 0) - (node.output_tokens or 0),
        ),
    }


def model_reasoning(state: RunProjection, event: Event, data: ModelReasoning) -> Update:
    return {}


def model_retry(state: RunProjection, event: Event, data: ModelRetry) -> Update:
    return {"model_retries": state.model_retries + 1}


def tool_call(state: RunProjection, event: Event, data: ToolCall) -> Update:
    return {}


def tool_result(state: RunProjection, event: Event, data: ToolResult) -> Update:
    return {"tool_nodes": state.tool_nodes + 1}


def step_end(state: RunProjection, event: Event, data: StepEnd) -> Update:
    return {"open_model_node": None} if state.open_model_node is not None else {}


# --- retained versions: the codec's upcaster, then the current rule -------------------------------
def model_retry_v1(state: RunProjection, event: Event, data: ModelRetryV1) -> Update:
    return model_retry(state, event, as_current(ModelRetry, event))


def tool_call_v1(state: RunProjection, event: Event, data: ToolCallV1) -> Update:
    return tool_call(state, event, as_current(ToolCall, event))


def tool_result_v1(state: RunProjection, event: Event, data: ToolResultV1) -> Update:
    return tool_result(state, event, as_current(ToolResult, event))


#: The runtime events' rows of the projector's table
#: (:data:`~runtrail.projection.projector.RULES`): each applies to a run that has not ended, and
#: may open a runtime-only run.
RULES: dict[tuple[str, int], Rule[Any]] = {
    ("MODEL_REQUEST", 1): Rule(ModelRequest, model_request, LIVE, LIVE_NEEDS),
    ("MODEL_RESPONSE", 1): Rule(ModelResponse, model_response, LIVE, LIVE_NEEDS),
    ("MODEL_REASONING", 1): Rule(ModelReasoning, model_reasoning, LIVE, LIVE_NEEDS),
    ("MODEL_RETRY", 1): Rule(ModelRetryV1, model_retry_v1, LIVE, LIVE_NEEDS),
    ("MODEL_RETRY", 2): Rule(ModelRetry, model_retry, LIVE, LIVE_NEEDS),
    ("TOOL_CALL", 1): Rule(ToolCallV1, tool_call_v1, LIVE, LIVE_NEEDS),
    ("TOOL_CALL", 2): Rule(ToolCall, tool_call, LIVE, LIVE_NEEDS),
    ("TOOL_RESULT", 1): Rule(ToolResultV1, tool_result_v1, LIVE, LIVE_NEEDS),
    ("TOOL_RESULT", 2): Rule(ToolResult, tool_result, LIVE, LIVE_NEEDS),
    ("STEP_END", 1): Rule(StepEnd, step_end, LIVE, LIVE_NEEDS),
}
