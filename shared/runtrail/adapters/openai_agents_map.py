"""OpenAI Agents SDK traces as runtrail events: the mapping, pure (no I/O, no threads).

One trace (one ``Runner.run``) is one runtrail run; its spans become seed-000 runtime events
and seed-002 lifecycle events. The tracing processor (:mod:`.openai_agents`) feeds a
:class:`TraceMapper` from its worker thread and publishes what it returns, so this module
holds all the decisions and none of the plumbing:

* identity: ``runId`` = the trace's ``metadata["runtrail_run_id"]``, else its ``trace_id``;
  ``sessionId`` = ``metadata["runtrail_session_id"]``, else ``group_id``, else the run ID;
  ``turnId`` = the ``trace_id``; ``step`` = the SDK's turn number (its Turn span), else a
  counter of model calls: each model call opens a step, its tool calls take that step;
* a Generation (or Response) span → MODEL_REQUEST (``{"model", "input", "config"}``) and, if
  it did not fail, MODEL_RESPONSE (the assistant text, and ``raw`` = output + usage); a model
  call after a failed one in the same step is preceded by MODEL_RETRY;
* a Function span → TOOL_CALL and TOOL_RESULT (``output``, or ``error`` from the span's
  error), with the ``callId`` the model's output gave that call (same name and arguments,
  else the same name in order), else the span's ID;
* a model that opens no Generation/Response span (a custom ``Model``) leaves only its Turn
  span: the step still opens (by the turn's first tool, else at its end) and closes, and the
  call, whose content is nowhere in the trace, is counted in :attr:`TraceMapper.dropped` as
  ``model_untraced`` with the turn's tokens in :attr:`TraceMapper.untraced_usage`;
* a Handoff span → a TOOL pair named ``handoff`` (the model called the transfer tool);
* the end of a Turn span (else the next model call, else the trace's end) → STEP_END;
* trace start → ``run.accepted`` + ``run.state_transitioned`` (received → executing); trace
  end → ``run.succeeded``, or ``run.failed`` when an Agent/Task span or a tripped Guardrail
  span said the run did not finish.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from runtrail.adapters import json_form
from runtrail.adapters.event_sink import EventSink

JsonDict = dict[str, Any]

RUN_ID_KEY = "runtrail_run_id"
SESSION_ID_KEY = "runtrail_session_id"
#: Traces held open at once; past it the oldest is forgotten (its end was dropped, or never came).
MAX_OPEN_TRACES = 10_000
_MAX_DEPTH = 32
#: Why a model call is not published: it opened no span, so its content is not in the trace.
MODEL_UNTRACED = "model_untraced"
#: Open traces forgotten to stay under ``max_open``.
EVICTED = "evicted"
#: Response attributes that are the call's configuration (the Responses API spans).
_RESPONSE_CONFIG = ("temperature", "top_p", "max_output_tokens", "tool_choice",
                    "parallel_tool_calls", "reasoning", "text", "truncation")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Emit:
    """One event to publish: type, payload, step and who caused it."""

    type: str
    data: JsonDict
    step: int | None = None
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class Identity:
    """Where a trace's events go: run, session and turn."""

    run_id: str
    session_id: str
    turn_id: str


def publish_emits(
    sink: EventSink, who: Identity, emits: list[Emit], *, tenant_id: str | None, default_agent: str
) -> int:
    """Publish ``emits`` in order for ``who``; how many the sink refused (each is the caller's
    ``rejected`` drop: the publisher logged why)."""
    refused = 0
    for emit in emits:
        event_id = sink.publish(
            emit.type,
            who.run_id,
            emit.data,
            session_id=who.session_id,
            turn_id=who.turn_id,
            step=emit.step,
            actor={"kind": "agent", "id": emit.agent or default_agent},
            tenant_id=tenant_id,
        )
        refused += event_id is None
    return refused


def jsonable(value: Any) -> Any:
    """``value`` as JSON the event codec accepts (:func:`runtrail.adapters.json_form.jsonable`;
    a pydantic model without its unset fields)."""
    return json_form.jsonable(value, max_depth=_MAX_DEPTH, exclude_none=True)


def parse_arguments(text: Any) -> Any:
    """Tool arguments as the model sent them: the JSON object, else the raw string."""
    if not isinstance(text, str):
        return jsonable(text)
    try:
        return jsonable(json.loads(text))
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return text


def _items(output: Any) -> Iterator[Mapping[str, Any]]:
    """Output items of any shape the SDK's models record: Responses items, a dumped
    ``Response`` (``{"output": [...]}``) or Chat Completions messages."""
    for item in output if isinstance(output, list | tuple) else [output]:
        if isinstance(item, BaseModel):
            item = item.model_dump(mode="json")
        if not isinstance(item, Mapping):
            continue
        nested = item.get("output")
        if isinstance(nested, list) and "type" not in item:
            yield from _items(nested)
        else:
            yield item


def output_text(output: Any) -> str:
    """The assistant text of a model output (message parts concatenated)."""
    parts: list[str] = []
    for item in _items(output):
        content = item.get("content")
        if isinstance(content, str) and item.get("role") == "assistant":
            parts.append(content)
        elif isinstance(content, list) and item.get("type", "message") == "message":
            parts += [c["text"] for c in content if isinstance(c, Mapping) and
                      isinstance(c.get("text"), str)]  # fmt: skip
    return "".join(parts)


def function_calls(output: Any) -> list[tuple[str, str, str]]:
    """``(name, arguments, call_id)`` of each tool call the model output asked for."""
    calls: list[tuple[str, str, str]] = []
    for item in _items(output):
        if item.get("type") == "function_call":
            calls.append(
                (str(item.get("name")), str(item.get("arguments")), str(item.get("call_id")))
            )
        for call in item.get("tool_calls") or ():  # Chat Completions
            if not isinstance(call, Mapping):
                continue
            fn = call.get("function") or {}
            calls.append((str(fn.get("name")), str(fn.get("arguments")), str(call.get("id"))))
    return calls


def _same_arguments(sent: str, ran: Any) -> bool:
    """Whether the tool ran with the arguments the model sent (as JSON: spacing may differ)."""
    return ran is None or sent == ran or parse_arguments(sent) == parse_arguments(ran)


def _tripped_guardrail(error: Any) -> bool:
    """Whether a Turn span ended because an input guardrail tripped (no model answer)."""
    return isinstance(error, Mapping) and isinstance(error.get("data"), Mapping) and \
        "guardrail" in error["data"]  # fmt: skip


def _error_text(error: Any) -> str | None:
    if not error:
        return None
    if isinstance(error, Mapping):
        message = str(error.get("message") or "error")
        data = error.get("data")
        return f"{message}: {json.dumps(jsonable(data))}" if data else message
    return str(error)


@dataclass
class _Run:
    """The state of one trace while its spans arrive."""

    who: Identity
    turns: dict[str, int] = field(default_factory=dict)  # open Turn span id -> turn number
    step: int = 0
    step_open: bool = False
    step_turn: int | None = None
    step_traced: bool = False  # a Generation/Response span was seen in the open step
    answered: bool = False
    failed_attempts: int = 0
    last_error: str | None = None
    tools_in_step: int = 0
    pending_calls: list[tuple[str, str, str]] = field(default_factory=list)
    agent: str | None = None
    failure: str | None = None


class TraceMapper:
    """Turns one process's trace and span callbacks into events, trace by trace."""

    def __init__(
        self, policy_version: str = "openai-agents", max_open: int = MAX_OPEN_TRACES
    ) -> None:
        self.policy_version = policy_version
        self.max_open = max(1, max_open)
        #: What was not published, by reason (``evicted``, ``model_untraced``); the processor
        #: takes it with :meth:`take_dropped` and counts it.
        self.dropped: Counter[str] = Counter()
        #: Tokens of the model calls counted as ``model_untraced`` (the Turn spans' usage).
        self.untraced_usage: Counter[str] = Counter()
        self._runs: dict[str, _Run] = {}

    def take_dropped(self) -> dict[str, int]:
        """The drops since the last call, by reason."""
        taken = dict(self.dropped)
        self.dropped.clear()
        return taken

    def take_untraced_usage(self) -> dict[str, int]:
        """The tokens of the untraced model calls since the last call, by kind."""
        taken = dict(self.untraced_usage)
        self.untraced_usage.clear()
        return taken

    def identity(self, trace_id: str) -> Identity | None:
        run = self._runs.get(trace_id)
        return run.who if run is not None else None

    # --- traces ---------------------------------------------------------------------------
    def trace_started(self, trace: Any) -> list[Emit]:
        self._run(trace.trace_id, getattr(trace, "metadata", None), trace.group_id)  # names it
        name = getattr(trace, "name", None) or "workflow"
        accepted = {"goalRef": f"openai-agents:{name}", "policyVersion": self.policy_version}
        moved = {"fromStatus": "received", "toStatus": "executing", "reason": "trace started"}
        return [Emit("run.accepted", accepted), Emit("run.state_transitioned", moved)]

    def trace_ended(self, trace: Any) -> list[Emit]:
        run = self._runs.pop(trace.trace_id, None)
        if run is None:
            return []
        out = self._end_step(run, "error" if run.failure else None)
        if run.failure is not None:
            out.append(Emit("run.failed", {"reason": run.failure[:500]}, run.step or None,
                            run.agent))  # fmt: skip
        else:
            result = {"resultRef": f"openai-agents-trace:{trace.trace_id}"}
            out.append(Emit("run.succeeded", result, run.step or None, run.agent))
        return out

    # --- spans ----------------------------------------------------------------------------
    def span_started(self, span: Any) -> list[Emit]:
        data = span.span_data
        run = self._run(span.trace_id)
        if data.type == "turn":
            turn = run.turns[span.span_id] = int(data.turn)
            if run.step_open and run.step_turn != turn:  # a step held open by an untraced call
                return self._end_step(run, None)
        elif data.type == "agent":
            run.agent = str(data.name)
        return []

    def span_ended(self, span: Any) -> list[Emit]:
        run = self._run(span.trace_id)
        kind = span.span_data.type
        handler = _HANDLERS.get(kind)
        return handler(self, run, span) if handler is not None else []

    # --- the handlers -----------------------------------------------------------------------
    def _model(self, run: _Run, span: Any) -> list[Emit]:
        data = span.span_data
        turn = run.turns.get(span.parent_id or "")
        out: list[Emit] = []
        if run.step_open and (turn != run.step_turn or (turn is None and run.answered)
                              or run.tools_in_step):  # fmt: skip
            out += self._end_step(run, None)
        if not run.step_open:
            self._open_step(run, turn)
        elif run.failed_attempts:
            reason = run.last_error or "the model call failed"
            out.append(self._emit(run, "MODEL_RETRY",
                                  {"attempt": run.failed_attempts, "reason": reason[:500]}))  # fmt: skip
        run.step_traced = True
        if data.type == "response":
            response = data.response
            model = getattr(response, "model", None)
            config = {k: jsonable(getattr(response, k, None)) for k in _RESPONSE_CONFIG
                      if getattr(response, k, None) is not None}  # fmt: skip
            output = getattr(response, "output", None) if response is not None else None
            usage = data.usage or jsonable(getattr(response, "usage", None))
        else:
            model, config, output, usage = data.model, data.model_config, data.output, data.usage
        prompt = {"model": str(model) if model is not None else None,
                  "input": jsonable(data.input), "config": jsonable(config or {})}  # fmt: skip
        out.append(self._emit(run, "MODEL_REQUEST", {"prompt": prompt}))
        error = _error_text(span.error)
        if error is not None:
            run.failed_attempts += 1
            run.last_error = error
            return out
        raw = {"output": jsonable(output), "usage": jsonable(usage)}
        text = output_text(output)
        out.append(self._emit(run, "MODEL_RESPONSE", {"message": text or None, "raw": raw}))
        run.answered = True
        run.pending_calls = function_calls(output)
        return out

    def _function(self, run: _Run, span: Any) -> list[Emit]:
        data = span.span_data
        out = self._tool_step(run, span)
        call_id = self._call_id(run, str(data.name), data.input) or span.span_id
        arguments = parse_arguments(data.input)
        error = _error_text(span.error)
        run.tools_in_step += 1
        return [
            *out,
            self._emit(run, "TOOL_CALL",
                       {"callId": call_id, "toolName": data.name, "arguments": arguments}),
            self._emit(run, "TOOL_RESULT", {
                "callId": call_id, "toolName": data.name,
                "output": None if error is not None else jsonable(data.output), "error": error,
            }),
        ]  # fmt: skip

    def _handoff(self, run: _Run, span: Any) -> list[Emit]:
        data = span.span_data
        out = self._tool_step(run, span)
        call_id = next((c for name, _, c in run.pending_calls if name.startswith("transfer_to")),
                       span.span_id)  # fmt: skip
        error = _error_text(span.error)
        moved = {"fromAgent": data.from_agent, "toAgent": data.to_agent}
        run.tools_in_step += 1
        return [
            *out,
            self._emit(run, "TOOL_CALL", {"callId": call_id, "toolName": "handoff",
                                          "arguments": {"fromAgent": data.from_agent}}),
            self._emit(run, "TOOL_RESULT", {"callId": call_id, "toolName": "handoff",
                                            "output": None if error else moved, "error": error}),
        ]  # fmt: skip

    def _turn(self, run: _Run, span: Any) -> list[Emit]:
        """A turn is one model call and the tools it asked for. Without a model span in it
        (a model that traces nothing) the turn's step is opened here if no tool opened it, and
        the call is counted untraced, with the turn's tokens. Such a step is held open when
        it has no tool: the agent's end (or the next turn) says whether the call failed."""
        turn = run.turns.pop(span.span_id, None)
        if turn is None:
            return []
        out: list[Emit] = []
        if not (run.step_open and run.step_turn == turn):  # nothing of the turn was seen
            if _tripped_guardrail(span.error):
                return []  # the input guardrail stopped the turn before the model answered
            out += self._end_step(run, None)
            self._open_step(run, turn)
        if not run.step_traced:
            usage = getattr(span.span_data, "usage", None)
            if isinstance(usage, Mapping):
                self.untraced_usage.update({k: v for k, v in usage.items()
                                            if isinstance(v, int) and v})  # fmt: skip
            if not run.tools_in_step and not span.error:
                return out
        return out + self._end_step(run, "error" if span.error else None)

    def _failed(self, run: _Run, span: Any) -> list[Emit]:
        error = _error_text(span.error)
        if error is not None and run.failure is None:
            run.failure = f"{span.span_data.type} span: {error}"
        return []

    def _guardrail(self, run: _Run, span: Any) -> list[Emit]:
        data = span.span_data
        if data.triggered and run.failure is None:
            run.failure = f"guardrail {data.name} tripped"
        return []

    # --- helpers ----------------------------------------------------------------------------
    def _run(self, trace_id: str, metadata: Any = None, group_id: Any = None) -> _Run:
        run = self._runs.get(trace_id)
        if run is None:
            meta = metadata if isinstance(metadata, Mapping) else {}
            run_id = str(meta.get(RUN_ID_KEY) or trace_id)
            session = str(meta.get(SESSION_ID_KEY) or group_id or run_id)
            while len(self._runs) >= self.max_open:  # dicts keep insertion order: oldest first
                del self._runs[next(iter(self._runs))]
                self.dropped[EVICTED] += 1
            run = self._runs[trace_id] = _Run(Identity(run_id, session, trace_id))
        return run

    def _emit(self, run: _Run, event_type: str, data: JsonDict) -> Emit:
        return Emit(event_type, data, run.step, run.agent)

    def _open_step(self, run: _Run, turn: int | None) -> None:
        run.step = turn if turn is not None and turn > run.step else run.step + 1
        run.step_open, run.step_turn, run.answered, run.step_traced = True, turn, False, False
        run.failed_attempts, run.tools_in_step, run.pending_calls = 0, 0, []

    def _tool_step(self, run: _Run, span: Any) -> list[Emit]:
        """Tools take the step of the model call that asked for them: the open one, else
        (an untraced model call) the step of their turn, opened here."""
        turn = run.turns.get(span.parent_id or "")
        if run.step_open and (turn is None or turn == run.step_turn):
            return []
        out = self._end_step(run, None)
        self._open_step(run, turn)
        return out

    def _end_step(self, run: _Run, reason: str | None) -> list[Emit]:
        if not run.step_open:
            return []
        run.step_open = False
        if not run.step_traced:
            self.dropped[MODEL_UNTRACED] += 1
        if reason is None and run.failed_attempts and not run.answered:
            reason = "error"  # the step's model call failed and was not retried
        elif reason is None:
            reason = "tool_use" if run.tools_in_step else "final_answer"
        return [self._emit(run, "STEP_END", {"reason": reason})]

    def _call_id(self, run: _Run, name: str, arguments: Any) -> str | None:
        """The model's call ID for this tool call: the first unused call of the step's model
        output with the same name and arguments, else with the same name (in order)."""
        calls = run.pending_calls
        for by_arguments in (True, False):
            for i, (called, sent, call_id) in enumerate(calls):
                if called == name and (not by_arguments or _same_arguments(sent, arguments)):
                    del calls[i]
                    return call_id
        return None


_HANDLERS = {
    "generation": TraceMapper._model,
    "response": TraceMapper._model,
    "function": TraceMapper._function,
    "handoff": TraceMapper._handoff,
    "turn": TraceMapper._turn,
    "agent": TraceMapper._failed,
    "task": TraceMapper._failed,
    "guardrail": TraceMapper._guardrail,
}
