"""OpenTelemetry GenAI spans → seed 000 runtime events and the run lifecycle. Pure: no I/O.

Mapped: the GenAI semantic conventions (``gen_ai.*``, semconv 1.37 to 1.38, status
"development"): attributes ``gen_ai.operation.name``, ``gen_ai.request.*``,
``gen_ai.response.*``, ``gen_ai.usage.input_tokens``/``output_tokens``, ``gen_ai.tool.*``,
``gen_ai.conversation.id``, ``gen_ai.input.messages``/``output.messages``/
``system_instructions`` (as attributes or on the ``gen_ai.client.inference.operation.details``
span event), and the older per-message events (``gen_ai.user.message``, ``gen_ai.choice``, …).

* **run** = the trace ID (32 hex digits); **session** = the first ``gen_ai.conversation.id``
  seen in the trace, else the run;
* **turn** = the span a model/tool span hangs under (its parent: the ``invoke_agent`` span),
  the run when it has none; a tool under a model span takes that model span's turn and step;
* **step** = the ordinal of the model span within its turn (``chat``/``text_completion``/
  ``generate_content`` open a step, STEP_END closes the one before, and the turn's own span
  ending closes the last); a model span right after a failed one retries that step;
* a model span → MODEL_REQUEST + MODEL_RESPONSE (or MODEL_RETRY when its status is ERROR);
  ``execute_tool`` → TOOL_CALL + TOOL_RESULT (``error`` when its status is ERROR);
* the first span of a trace opens the run (``run.accepted``, then ``executing``); its local
  root span ending ends it (``run.succeeded``, ``run.failed`` on status ERROR).

Spans of other conventions (OpenInference, …) are first read as GenAI ones
(:mod:`runtrail.adapters.otel_conventions`): the values they translate are marked ``verbatim``
(never parsed again as JSON text), and a span marked ``turn_only`` (OpenInference's CHAIN) is
an agent span only as a local root or as a turn's span, else not GenAI.

Spans without ``gen_ai.operation.name`` (HTTP, DB, … spans) and GenAI operations with no
runtime event (``embeddings``, ``create_agent``…) publish nothing and are counted in
:attr:`Mapped.dropped` by reason — except a local root span of a trace that published
something: it still ends the run. A span of a trace whose run already ended (it ended after
its root) is counted as ``after-run-end`` and dropped. State is per trace, bounded (oldest
traces forgotten first).
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runtrail.adapters.otel_conventions import as_genai
from runtrail.adapters.otel_spans import SpanView

SEMCONV_VERSION = "1.37"
POLICY_VERSION = "otel-genai-1"

MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent"})

#: the ``gen_ai.request.*`` parameters copied into the prompt's ``params``
_PARAMS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "frequency_penalty",
    "presence_penalty",
    "stop_sequences",
    "seed",
    "choice.count",
)
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"


@dataclass(frozen=True)
class Out:
    """One event to publish (the publisher builds the envelope)."""

    event_type: str
    run_id: str
    data: dict[str, Any]
    session_id: str
    turn_id: str | None
    step: int | None
    occurred_at: str
    #: the span it came from (its trace context goes along as ``traceparent``)
    span_id: str


@dataclass
class Mapped:
    events: list[Out] = field(default_factory=list)
    #: spans that published nothing, by reason (``not-genai``, ``unmapped-operation:NAME``)
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass
class _Turn:
    step: int = 0
    open: bool = False
    retry_pending: bool = False


@dataclass
class _Trace:
    run_id: str
    session_id: str
    turns: dict[str, _Turn] = field(default_factory=dict)
    #: model span → (turn, step): tools under a model span join its step
    model_steps: dict[str, tuple[str, int]] = field(default_factory=dict)


def iso(ns: int) -> str:
    """Nanoseconds since the epoch as the envelope's ISO-8601 UTC with milliseconds."""
    moment = datetime.fromtimestamp(ns / 1e9, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _json(value: Any) -> Any:
    """Attributes carrying JSON as text (messages, tool arguments) are parsed; other text stays."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _value(span: SpanView, attrs: Mapping[str, Any], key: str) -> Any:
    """An attribute's value: JSON text parsed, unless a convention gave the value itself."""
    value = attrs.get(key)
    return _plain(value) if key in span.verbatim else _json(value)


def _details(span: SpanView) -> Mapping[str, Any]:
    """The message attributes: on the span, else on its operation-details event."""
    details = [e for e in span.events if e.name == _DETAILS_EVENT]
    if not details:
        return span.attributes
    attrs = dict(span.attributes)
    for event in details:
        for key, value in event.attributes.items():
            attrs.setdefault(key, value)
    return attrs


def _legacy_messages(span: SpanView) -> tuple[list[Any], list[Any]]:
    """Pre-1.37 per-message span events: (input messages, choices)."""
    inputs: list[Any] = []
    choices: list[Any] = []
    for event in span.events:
        role = _MESSAGE_EVENTS.get(event.name)
        if role is not None:
            body = {k: _json(v) for k, v in event.attributes.items() if k != "gen_ai.system"}
            inputs.append({"role": role, **body})
        elif event.name == "gen_ai.choice":
            choices.append({k: _json(v) for k, v in event.attributes.items()})
    return inputs, choices


def output_text(messages: Any) -> str | None:
    """The text parts of the output messages (semconv ``parts`` or a plain ``content``)."""
    if not isinstance(messages, list):
        return messages if isinstance(messages, str) else None
    texts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        parts = message.get("parts")
        if isinstance(parts, list):
            texts.extend(
                str(p.get("content"))
                for p in parts
                if isinstance(p, dict) and p.get("type") == "text" and p.get("content") is not None
            )
        elif isinstance(message.get("content"), str):
            texts.append(message["content"])
        elif isinstance(message.get("message"), dict):  # gen_ai.choice
            content = message["message"].get("content")
            if isinstance(content, str):
                texts.append(content)
    return "".join(texts) if texts else None


def model_prompt(span: SpanView, operation: str) -> dict[str, Any]:
    """MODEL_REQUEST's prompt: model, messages, system instructions, request parameters."""
    attrs = _details(span)
    legacy_in, _ = _legacy_messages(span)
    prompt: dict[str, Any] = {
        "model": attrs.get("gen_ai.request.model"),
        "operation": operation,
        "provider": attrs.get("gen_ai.provider.name", attrs.get("gen_ai.system")),
        "messages": _value(span, attrs, "gen_ai.input.messages") or legacy_in or None,
    }
    system = _value(span, attrs, "gen_ai.system_instructions")
    if system is not None:
        prompt["system"] = system
    params = {
        name: _plain(attrs[f"gen_ai.request.{name}"])
        for name in _PARAMS
        if f"gen_ai.request.{name}" in attrs
    }
    if params:
        prompt["params"] = params
    tools = _value(span, attrs, "gen_ai.tool.definitions")
    if tools is not None:
        prompt["tools"] = tools
    return prompt


def model_raw(span: SpanView) -> dict[str, Any]:
    """MODEL_RESPONSE's raw payload: the response attributes, ``usage`` as capture reads it."""
    attrs = _details(span)
    _, choices = _legacy_messages(span)
    raw: dict[str, Any] = {
        "model": attrs.get("gen_ai.response.model"),
        "id": attrs.get("gen_ai.response.id"),
        "finishReasons": _plain(attrs.get("gen_ai.response.finish_reasons")),
        "outputMessages": _value(span, attrs, "gen_ai.output.messages") or choices or None,
    }
    usage = {
        key: attrs[f"gen_ai.usage.{key}"]
        for key in ("input_tokens", "output_tokens")
        if f"gen_ai.usage.{key}" in attrs
    }
    if usage:
        raw["usage"] = usage
    return {k: v for k, v in raw.items() if v is not None}


class TraceMapper:
    """Turns batches of ended spans into events, keeping each open trace's turns and steps."""

    def __init__(self, *, max_traces: int = 10_000) -> None:
        self.max_traces = max(1, max_traces)
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        #: traces whose run ended (bounded like the open ones): a late span is not a new run
        self._ended: OrderedDict[str, None] = OrderedDict()
        #: traces forgotten to stay under ``max_traces`` before their root span ended
        self.evicted = 0

    def map(self, spans: Iterable[SpanView]) -> Mapped:
        """Events of ``spans`` in the order they ended (a parent after its children)."""
        batch = [as_genai(span) for span in spans]
        parents = {s.parent_span_id for s in batch if s.parent_span_id}
        batch.sort(key=lambda s: (s.end_ns, s.span_id in parents))
        out = Mapped()
        for span in batch:
            self._one(span, out)
        return out

    @property
    def open_traces(self) -> int:
        return len(self._traces)

    # --- one span ---------------------------------------------------------------------------
    def _one(self, span: SpanView, out: Mapped) -> None:
        operation = span.attributes.get("gen_ai.operation.name")
        if not isinstance(operation, str) or not operation:
            operation = None
        trace = self._traces.get(span.trace_id)
        is_turn = trace is not None and span.span_id in trace.turns
        if span.turn_only and not (span.local_root or is_turn):
            operation = None
        if trace is None and span.trace_id in self._ended:
            out.dropped["after-run-end"] += 1
            return
        opens = operation in MODEL_OPERATIONS or operation in TOOL_OPERATIONS
        if trace is None and (opens or operation == "invoke_agent"):
            trace = self._open(span, out)
        if operation in MODEL_OPERATIONS:
            assert trace is not None
            self._model(trace, span, operation, out)
        elif operation in TOOL_OPERATIONS:
            assert trace is not None
            self._tool(trace, span, out)
        elif trace is None or not (operation == "invoke_agent" or span.local_root):
            if trace is not None:
                self._end_turn(trace, span, out)
            out.dropped[
                "not-genai" if operation is None else f"unmapped-operation:{operation}"
            ] += 1
        else:
            self._end_turn(trace, span, out)
        if trace is not None and span.local_root:
            self._close(trace, span, out)

    def _end_turn(self, trace: _Trace, span: SpanView, out: Mapped) -> None:
        """The span a turn hangs under ended (the agent span, or any parent): its last step."""
        turn = trace.turns.get(span.span_id)
        if turn is not None and turn.open:
            self._step_end(trace, span.span_id, turn, span, "agent_end", out)

    def _emit(
        self,
        out: Mapped,
        trace: _Trace,
        span: SpanView,
        event_type: str,
        data: dict[str, Any],
        *,
        turn: str | None = None,
        step: int | None = None,
        at_ns: int | None = None,
    ) -> None:
        out.events.append(
            Out(
                event_type,
                trace.run_id,
                data,
                trace.session_id,
                turn,
                step,
                iso(span.end_ns if at_ns is None else at_ns),
                span.span_id,
            )
        )

    # --- the run ----------------------------------------------------------------------------
    def _open(self, span: SpanView, out: Mapped) -> _Trace:
        conversation = span.attributes.get("gen_ai.conversation.id")
        run_id = span.trace_id
        trace = _Trace(run_id, str(conversation) if conversation else run_id)
        self._traces[span.trace_id] = trace
        while len(self._traces) > self.max_traces:
            self._traces.popitem(last=False)
            self.evicted += 1
        at = span.start_ns
        self._emit(
            out,
            trace,
            span,
            "run.accepted",
            {"goalRef": f"otel-trace:{run_id}", "policyVersion": POLICY_VERSION},
            at_ns=at,
        )
        self._emit(
            out,
            trace,
            span,
            "run.state_transitioned",
            {"fromStatus": "received", "toStatus": "executing", "reason": "first GenAI span"},
            at_ns=at,
        )
        return trace

    def _close(self, trace: _Trace, root: SpanView, out: Mapped) -> None:
        for turn_id, turn in trace.turns.items():
            if turn.open:
                self._step_end(trace, turn_id, turn, root, "run_end", out)
        if root.error:
            reason = root.status_message or f"span {root.name!r} ended with status ERROR"
            self._emit(out, trace, root, "run.failed", {"reason": reason[:500]})
        else:
            self._emit(
                out, trace, root, "run.succeeded", {"resultRef": f"otel-span:{root.span_id}"}
            )
        self._traces.pop(root.trace_id, None)
        self._ended[root.trace_id] = None
        while len(self._ended) > self.max_traces:
            self._ended.popitem(last=False)

    # --- turns and steps --------------------------------------------------------------------
    def _turn_of(self, trace: _Trace, span: SpanView) -> str:
        return span.parent_span_id or trace.run_id

    def _step_end(
        self, trace: _Trace, turn_id: str, turn: _Turn, span: SpanView, reason: str, out: Mapped
    ) -> None:
        self._emit(out, trace, span, "STEP_END", {"reason": reason}, turn=turn_id, step=turn.step)
        turn.open = False

    def _model(self, trace: _Trace, span: SpanView, operation: str, out: Mapped) -> None:
        turn_id = self._turn_of(trace, span)
        turn = trace.turns.setdefault(turn_id, _Turn())
        if not turn.retry_pending or turn.step == 0:
            if turn.open:
                self._step_end(trace, turn_id, turn, span, "model_call", out)
            turn.step += 1
        turn.open = True
        step = turn.step
        trace.model_steps[span.span_id] = (turn_id, step)
        start = span.start_ns
        self._emit(
            out,
            trace,
            span,
            "MODEL_REQUEST",
            {"prompt": model_prompt(span, operation)},
            turn=turn_id,
            step=step,
            at_ns=start,
        )
        if span.error:
            attempt = sum(1 for t, s in trace.model_steps.values() if (t, s) == (turn_id, step))
            reason = span.status_message or str(span.attributes.get("error.type") or "error")
            self._emit(
                out,
                trace,
                span,
                "MODEL_RETRY",
                {"attempt": attempt, "reason": reason[:500]},
                turn=turn_id,
                step=step,
            )
            turn.retry_pending = True
            return
        turn.retry_pending = False
        raw = model_raw(span)
        self._emit(
            out,
            trace,
            span,
            "MODEL_RESPONSE",
            {"message": output_text(raw.get("outputMessages")), "raw": raw},
            turn=turn_id,
            step=step,
        )

    def _tool(self, trace: _Trace, span: SpanView, out: Mapped) -> None:
        placed = trace.model_steps.get(span.parent_span_id or "")
        if placed is not None:
            turn_id, step = placed
        else:
            turn_id = self._turn_of(trace, span)
            turn = trace.turns.setdefault(turn_id, _Turn())
            if turn.step == 0:
                turn.step = 1
            turn.open = True
            step = turn.step
        attrs = span.attributes
        call_id = str(attrs.get("gen_ai.tool.call.id") or span.span_id)
        name = str(attrs.get("gen_ai.tool.name") or span.name)
        arguments = _value(span, attrs, "gen_ai.tool.call.arguments")
        self._emit(
            out,
            trace,
            span,
            "TOOL_CALL",
            {"callId": call_id, "toolName": name, "arguments": arguments},
            turn=turn_id,
            step=step,
            at_ns=span.start_ns,
        )
        result: dict[str, Any] = {"callId": call_id, "toolName": name}
        if span.error:
            detail = span.status_message or str(attrs.get("error.type") or "error")
            result["error"] = detail[:2000]
        else:
            result["output"] = _value(span, attrs, "gen_ai.tool.call.result")
        self._emit(out, trace, span, "TOOL_RESULT", result, turn=turn_id, step=step)
