"""OpenTelemetry GenAI spans → seed 000 runtime events and the run lifecycle. Pure: no I/O.

Mapped: the GenAI semantic conventions (``gen_ai.*``, semconv 1.37 to 1.38, status
"development"): attributes ``gen_ai.operation.name``, ``gen_ai.request.*``,
``gen_ai.response.*``, ``gen_ai.usage.input_tokens``/``output_tokens``, ``gen_ai.tool.*``,
``gen_ai.conversation.id``, ``gen_ai.input.messages``/``output.messages``/
``system_instructions`` (as attributes or on the ``gen_ai.client.inference.operation.details``
span event), and the older per-message events (``gen_ai.user.message``, ``gen_ai.choice``, …).

* **run** = the trace ID (32 hex digits); **session** = by the precedence of
  :mod:`runtrail.adapters.otel_grouping` (``gen_ai.conversation.id``, ``session.id``,
  ``langfuse.session.id``, a configured resource attribute, else the run);
* **turn** = the span a model/tool span hangs under (its parent: the ``invoke_agent`` span),
  the run when it has none; a tool under a model span takes that model span's turn and step;
* **step** = the ordinal of the model span within its turn (``chat``/``text_completion``/
  ``generate_content`` open a step, STEP_END closes the one before, and the turn's own span
  ending closes the last); a model span right after a failed one retries that step; a tool
  span that hangs under the turn takes the step of the last model call started before it;
* a model span → MODEL_REQUEST + MODEL_RESPONSE (or MODEL_RETRY when its status is ERROR);
  ``execute_tool`` → TOOL_CALL + TOOL_RESULT (``error`` when its status is ERROR, and the
  result too when the span has one: what the model was told); why a span failed is
  :func:`error_detail` (status message, else its ``exception`` event, else ``error.type``);
* the run opens with its first event (``run.accepted``, then ``executing``); its local root
  span ending ends it (``run.succeeded``, ``run.failed`` on status ERROR), after everything
  of its trace in that batch.

**Values keep their types.** Only the attributes the semconv defines as structured
(:data:`STRUCTURED`: the messages, system instructions, tool definitions and the
JSON-serialized tool arguments) are parsed from JSON text; every other attribute — the tool
result included — stays as sent (a string that reads as JSON is still a string).

**Order: by start, not arrival.** A span arrives when it ends, parents after children, and
Google ADK ends a model span after the tool span inside it. Each trace's spans in a batch are
mapped in :func:`~runtrail.adapters.otel_order.mapping_order`: a model/tool span at its start
(a parent before its children), any other span at its end, the local root last. Across
batches:

* a tool span whose parent has not been seen (neither a model span nor a known turn) waits
  in its trace until the parent arrives — then it is placed under it (in the model call's
  step, or in the turn) — or until a model span of that turn arrives, or until the run ends
  (placed in its parent's turn); at most :data:`MAX_PENDING` wait per trace;
* a span is *late* when a span started after it was already mapped. A late tool span is
  placed by its start (the step of the last model call started before it): its events carry
  the right turn and step, come after that step's STEP_END, and are counted in
  :attr:`Mapped.late`. A late model span, or a tool that started before the turn's first
  step, has no right place (its step number is taken): it is dropped, counted as
  ``late-span``, and so are the tools under it. Nothing late is placed with wrong content.

Spans of other conventions (OpenInference, …) are first read as GenAI ones
(:mod:`runtrail.adapters.otel_conventions`): the values they translate are marked ``verbatim``
(never parsed again as JSON text), and a span marked ``turn_only`` (OpenInference's CHAIN) is
an agent span only as a local root or as a turn's span, else not GenAI.

Spans without ``gen_ai.operation.name`` (HTTP, DB, … spans) and GenAI operations with no
runtime event (``embeddings``, ``create_agent``…) publish nothing and are counted in
:attr:`Mapped.dropped` by reason — except a local root span of a trace that published
something: it still ends the run. A span of a trace whose run already ended (it ended after
its root) is counted as ``after-run-end`` and dropped. State is per trace, bounded (oldest
traces forgotten first, with their waiting tools).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runtrail.adapters.otel_conventions import as_genai
from runtrail.adapters.otel_grouping import Grouping, by_trace
from runtrail.adapters.otel_order import mapping_order
from runtrail.adapters.otel_spans import SpanView
from runtrail.drops.tally import DropTally

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
_LAST = 1 << 62
#: tool spans one trace may hold while their parents have not arrived; past it, a tool is
#: placed at once in the turn of the span it hangs under
MAX_PENDING = 1024


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
    #: spans that published nothing, by reason (``not-genai``, ``unmapped-operation:NAME``,
    #: ``after-run-end``, ``late-span``)
    dropped: Counter[str] = field(default_factory=Counter)
    #: spans mapped late: into a step that had already ended (their turn and step are right)
    late: int = 0
    #: spans recorded without something they should carry, by reason
    #: (``model-without-content``: a model call with no messages in or out — the
    #: instrumentation was told not to capture content, or sent it in log records never joined)
    incomplete: Counter[str] = field(default_factory=Counter)
    #: both of the above by trace (= run) and reason, each with a sample span name
    tally: DropTally = field(default_factory=DropTally)

    def drop(self, span: SpanView, reason: str) -> None:
        """``span`` published nothing, for ``reason``."""
        self.dropped[reason] += 1
        self.tally.add(span.trace_id, reason, span.name)

    def lack(self, span: SpanView, reason: str) -> None:
        """``span`` was recorded without something it should carry."""
        self.incomplete[reason] += 1
        self.tally.add(span.trace_id, reason, span.name)


#: a model span recorded with neither its input nor its output messages
WITHOUT_CONTENT = "model-without-content"


@dataclass
class _Turn:
    step: int = 0
    open: bool = False
    retry_pending: bool = False
    #: (start, step) of each node that opened or retried a step, in start order
    starts: list[tuple[int, int]] = field(default_factory=list)

    def step_at(self, start_ns: int) -> int | None:
        """The step a tool starting at ``start_ns`` belongs to: that of the last model call
        started before it (the first tool of a turn without one opens step 1); None when it
        started before the turn's first step and that step is taken."""
        if not self.starts:
            if self.step == 0:
                self.step = 1
            self.starts.append((start_ns, self.step))
            return self.step
        at = bisect_right(self.starts, (start_ns, _LAST))
        return self.starts[at - 1][1] if at else None


@dataclass
class _Trace:
    run_id: str
    #: decided when the run opens: its first event (until then, tools may wait for parents)
    session_id: str = ""
    opened: bool = False
    turns: dict[str, _Turn] = field(default_factory=dict)
    #: model span → (turn, step): tools under a model span join its step (None: it was late)
    model_steps: dict[str, tuple[str, int] | None] = field(default_factory=dict)
    #: tool spans waiting for their parent span to say what it is (a model call or a turn)
    pending: dict[str, list[SpanView]] = field(default_factory=dict)
    pending_count: int = 0
    #: whether a MODEL_REQUEST was published (the first one carries the user)
    requested: bool = False


def iso(ns: int) -> str:
    """Nanoseconds since the epoch as the envelope's ISO-8601 UTC with milliseconds."""
    moment = datetime.fromtimestamp(ns / 1e9, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


#: the attributes the GenAI semconv defines as structured (JSON text on a span): parsed
STRUCTURED = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.tool.call.arguments",  # "the JSON-serialized arguments object"
    }
)
#: the structured fields of the pre-1.37 message events (``gen_ai.choice`` and the rest)
_STRUCTURED_EVENT_FIELDS = frozenset({"message", "tool_calls"})


def _parsed(value: Any) -> Any:
    """A structured attribute: its JSON text parsed (text that is not JSON stays text, as does
    JSON nested deeper than the parser recurses: 100,000 ``[`` crashed the mapping)."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    if isinstance(value, tuple):
        return [_parsed(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """Any other attribute as it was sent: text stays text (a tool result that reads as JSON is
    still the text the tool returned), arrays become lists."""
    return list(value) if isinstance(value, tuple) else value


def _attribute(span: SpanView, attrs: Mapping[str, Any], key: str) -> Any:
    """An attribute's value: a structured one's JSON text parsed, unless a convention gave the
    value itself (``verbatim``); every other value as sent."""
    value = attrs.get(key)
    if key in STRUCTURED and key not in span.verbatim:
        return _parsed(value)
    return _plain(value)


def _event_field(key: str, value: Any) -> Any:
    return _parsed(value) if key in _STRUCTURED_EVENT_FIELDS else _plain(value)


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
            body = {
                k: _event_field(k, v) for k, v in event.attributes.items() if k != "gen_ai.system"
            }
            inputs.append({"role": role, **body})
        elif event.name == "gen_ai.choice":
            choices.append({k: _event_field(k, v) for k, v in event.attributes.items()})
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
    text = "".join(texts)
    return text or None  # no text (a streamed tool call opens with ""), not an empty one


def model_prompt(span: SpanView, operation: str) -> dict[str, Any]:
    """MODEL_REQUEST's prompt: model, messages, system instructions, request parameters."""
    attrs = _details(span)
    legacy_in, _ = _legacy_messages(span)
    prompt: dict[str, Any] = {
        "model": attrs.get("gen_ai.request.model"),
        "operation": operation,
        "provider": attrs.get("gen_ai.provider.name", attrs.get("gen_ai.system")),
        "messages": _attribute(span, attrs, "gen_ai.input.messages") or legacy_in or None,
    }
    if attrs.get("gen_ai.system_instructions") is not None:
        prompt["system"] = _attribute(span, attrs, "gen_ai.system_instructions")
    params = {
        name: _plain(attrs[f"gen_ai.request.{name}"])
        for name in _PARAMS
        if f"gen_ai.request.{name}" in attrs
    }
    if params:
        prompt["params"] = params
    if attrs.get("gen_ai.tool.definitions") is not None:
        prompt["tools"] = _attribute(span, attrs, "gen_ai.tool.definitions")
    return prompt


def model_raw(span: SpanView) -> dict[str, Any]:
    """MODEL_RESPONSE's raw payload: the response attributes, ``usage`` as capture reads it."""
    attrs = _details(span)
    _, choices = _legacy_messages(span)
    raw: dict[str, Any] = {
        "model": attrs.get("gen_ai.response.model"),
        "id": attrs.get("gen_ai.response.id"),
        "finishReasons": _plain(attrs.get("gen_ai.response.finish_reasons")),
        "outputMessages": _attribute(span, attrs, "gen_ai.output.messages") or choices or None,
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
    """Turns batches of ended spans into events, keeping each open trace's turns and steps.

    ``session_resource_attribute``: the resource attribute naming the session when no span
    does (see :mod:`runtrail.adapters.otel_grouping`).
    """

    def __init__(
        self, *, max_traces: int = 10_000, session_resource_attribute: str | None = None
    ) -> None:
        self.max_traces = max(1, max_traces)
        self.grouping = Grouping(session_resource_attribute)
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        #: traces whose run ended (bounded like the open ones): a late span is not a new run
        self._ended: OrderedDict[str, None] = OrderedDict()
        #: traces forgotten to stay under ``max_traces`` before their root span ended
        self.evicted = 0
        #: the spans of the trace being mapped, in this batch (where its session is read)
        self._at_hand: list[SpanView] = []

    def map(self, spans: Iterable[SpanView]) -> Mapped:
        """Events of ``spans``, each trace's in :func:`~runtrail.adapters.otel_order.mapping_order`."""
        out = Mapped()
        for trace_spans in by_trace(as_genai(span) for span in spans).values():
            self._at_hand = trace_spans
            try:
                for span in mapping_order(trace_spans, _opens_node):
                    self._one(span, out)
            finally:
                self._at_hand = []
        return out

    @property
    def open_traces(self) -> int:
        return len(self._traces)

    def is_open(self, trace_id: str) -> bool:
        """Whether state is kept for ``trace_id`` (its run has not ended, nor was forgotten)."""
        return trace_id in self._traces

    def forget(self, trace_id: str) -> bool:
        """Drop an open trace's turns, steps and waiting tools (it went idle: its root is not
        coming); whether it was open. A later span of it opens the run again."""
        return self._traces.pop(trace_id, None) is not None

    # --- one span ---------------------------------------------------------------------------
    def _one(self, span: SpanView, out: Mapped) -> None:
        operation = _operation(span)
        trace = self._traces.get(span.trace_id)
        is_turn = trace is not None and span.span_id in trace.turns
        if span.turn_only and not (span.local_root or is_turn):
            operation = None
        if trace is None and span.trace_id in self._ended:
            out.drop(span, "after-run-end")
            return
        if trace is None and (_opens_node(span) or operation == "invoke_agent"):
            trace = self._track(span)
        if operation in MODEL_OPERATIONS:
            assert trace is not None and operation is not None
            self._model(trace, span, operation, out)
            self._release(trace, span.span_id, out)
        elif operation in TOOL_OPERATIONS:
            assert trace is not None
            self._tool(trace, span, out, parent_seen=False)
            self._release(trace, span.span_id, out)
        elif trace is None or not (operation == "invoke_agent" or span.local_root):
            if trace is not None:
                self._release(trace, span.span_id, out)
                self._end_turn(trace, span, out)
            out.drop(span, "not-genai" if operation is None else f"unmapped-operation:{operation}")
        else:
            self._release(trace, span.span_id, out)
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
        if not trace.opened:
            self._open(trace, span, out)
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
    def _track(self, span: SpanView) -> _Trace:
        """Keep state for the trace of ``span`` (bounded: the oldest trace is forgotten)."""
        trace = self._traces[span.trace_id] = _Trace(span.trace_id)
        while len(self._traces) > self.max_traces:
            self._traces.popitem(last=False)
            self.evicted += 1
        return trace

    def _open(self, trace: _Trace, span: SpanView, out: Mapped) -> None:
        """The run's first event: ``run.accepted`` and ``executing``, in the session the spans
        at hand name (a tool waiting for its parent has not opened it)."""
        trace.opened = True
        waiting = [s for spans in trace.pending.values() for s in spans]
        trace.session_id = self.grouping.session_of(self._at_hand + waiting, trace.run_id)
        at = min(s.start_ns for s in (*self._at_hand, *waiting, span))
        self._emit(
            out,
            trace,
            span,
            "run.accepted",
            {"goalRef": f"otel-trace:{trace.run_id}", "policyVersion": POLICY_VERSION},
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

    def _close(self, trace: _Trace, root: SpanView, out: Mapped) -> None:
        for parent in list(trace.pending):  # their parents never came: placed as they are
            self._release(trace, parent, out)
        for turn_id, turn in trace.turns.items():
            if turn.open:
                self._step_end(trace, turn_id, turn, root, "run_end", out)
        if root.error:
            reason = error_detail(root) or f"span {root.name!r} ended with status ERROR"
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

    def _release(self, trace: _Trace, parent: str, out: Mapped) -> None:
        """The tool spans waiting for ``parent`` (it has been mapped): map them now."""
        waiting = trace.pending.pop(parent, None)
        if not waiting:
            return
        trace.pending_count -= len(waiting)
        for span in sorted(waiting, key=lambda s: s.start_ns):
            self._tool(trace, span, out, parent_seen=True)
            self._release(trace, span.span_id, out)

    def _model(self, trace: _Trace, span: SpanView, operation: str, out: Mapped) -> None:
        turn_id = self._turn_of(trace, span)
        turn = trace.turns.setdefault(turn_id, _Turn())
        if turn.starts and span.start_ns < turn.starts[-1][0]:
            # a later model call of this turn was mapped already: its step is taken
            trace.model_steps[span.span_id] = None
            out.drop(span, "late-span")
            return
        # tools waiting for this turn's span that started before this call belong to a step
        # before it; the others after it
        waiting = trace.pending.pop(turn_id, [])
        trace.pending_count -= len(waiting)
        for tool in sorted(waiting, key=lambda s: s.start_ns):
            if tool.start_ns < span.start_ns:
                self._tool(trace, tool, out, parent_seen=True)
                self._release(trace, tool.span_id, out)
            else:
                trace.pending.setdefault(turn_id, []).append(tool)
                trace.pending_count += 1
        if not turn.retry_pending or turn.step == 0:
            if turn.open:
                self._step_end(trace, turn_id, turn, span, "model_call", out)
            turn.step += 1
        turn.open = True
        step = turn.step
        turn.starts.append((span.start_ns, step))
        trace.model_steps[span.span_id] = (turn_id, step)
        prompt = model_prompt(span, operation)
        if not trace.requested:
            trace.requested = True
            user = self.grouping.user_of(self._at_hand)
            if user:
                prompt["metadata"] = user
        self._emit(
            out,
            trace,
            span,
            "MODEL_REQUEST",
            {"prompt": prompt},
            turn=turn_id,
            step=step,
            at_ns=span.start_ns,
        )
        if span.error:
            attempt = sum(1 for p in trace.model_steps.values() if p == (turn_id, step))
            reason = error_detail(span) or "error"
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
        else:
            turn.retry_pending = False
            raw = model_raw(span)
            if prompt.get("messages") is None and raw.get("outputMessages") is None:
                out.lack(span, WITHOUT_CONTENT)
            self._emit(
                out,
                trace,
                span,
                "MODEL_RESPONSE",
                {"message": output_text(raw.get("outputMessages")), "raw": raw},
                turn=turn_id,
                step=step,
            )
        self._release(trace, turn_id, out)

    def _place_tool(
        self, trace: _Trace, span: SpanView, out: Mapped, *, parent_seen: bool
    ) -> tuple[str, int] | None:
        """(turn, step) of a tool span; None when it waits for its parent or was dropped."""
        parent = span.parent_span_id
        if parent is not None and parent in trace.model_steps:
            placed = trace.model_steps[parent]
            if placed is None:  # under a model call dropped as late
                out.drop(span, "late-span")
                return None
            turn = trace.turns[placed[0]]
            if placed[1] != turn.step or not turn.open:
                out.late += 1
            return placed
        waits = parent is not None and not span.local_root and parent not in trace.turns
        if waits and not parent_seen and trace.pending_count < MAX_PENDING:
            # a model span ending after its tools (ADK), or a turn with no model call yet
            assert parent is not None
            trace.pending.setdefault(parent, []).append(span)
            trace.pending_count += 1
            return None
        turn_id = self._turn_of(trace, span)
        turn = trace.turns.setdefault(turn_id, _Turn())
        step = turn.step_at(span.start_ns)
        if step is None:
            out.drop(span, "late-span")
            return None
        if step == turn.step:
            turn.open = True
        else:
            out.late += 1
        return turn_id, step

    def _tool(self, trace: _Trace, span: SpanView, out: Mapped, *, parent_seen: bool) -> None:
        placed = self._place_tool(trace, span, out, parent_seen=parent_seen)
        if placed is None:
            return
        turn_id, step = placed
        attrs = span.attributes
        call_id = str(attrs.get("gen_ai.tool.call.id") or span.span_id)
        name = str(attrs.get("gen_ai.tool.name") or span.name)
        arguments = _attribute(span, attrs, "gen_ai.tool.call.arguments")
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
            result["error"] = (error_detail(span) or "error")[:2000]
        if not span.error or "gen_ai.tool.call.result" in attrs:  # what the model was told
            result["output"] = _attribute(span, attrs, "gen_ai.tool.call.result")
        self._emit(out, trace, span, "TOOL_RESULT", result, turn=turn_id, step=step)


def error_detail(span: SpanView) -> str | None:
    """Why a span failed, from what says most: its status message, else the exception it
    recorded (OTel's ``exception`` span event, as ``type: message``; pydantic-ai sets no status
    message), else ``error.type``."""
    if span.status_message:
        return span.status_message
    for event in span.events:
        if event.name == "exception":
            kind = str(event.attributes.get("exception.type") or "")
            message = str(event.attributes.get("exception.message") or "")
            if kind or message:
                return f"{kind}: {message}" if kind and message else kind or message
    error_type = span.attributes.get("error.type")
    return str(error_type) if error_type else None


def _operation(span: SpanView) -> str | None:
    operation = span.attributes.get("gen_ai.operation.name")
    return operation if isinstance(operation, str) and operation else None


def _opens_node(span: SpanView) -> bool:
    """A model or tool span: it opens a node (MODEL_REQUEST, TOOL_CALL) at its start."""
    operation = _operation(span)
    return operation in MODEL_OPERATIONS or operation in TOOL_OPERATIONS
