"""LiteLLM calls as runtrail events: the mapping, pure (no I/O, no threads, no litellm import).

The logger (:mod:`.litellm`) turns each finished call LiteLLM reports into a :class:`Call`
(:func:`call_of`, from LiteLLM's ``standard_logging_object`` where it says what is needed) and
hands the calls of a run to a :class:`CallMapper` in the order they started; the mapper holds
all the decisions:

* identity: ``runId`` = ``metadata["runtrail_run_id"]`` (several calls, one run, ended by
  :meth:`CallMapper.end_run`), else the call's ``litellm_call_id`` (the call is the whole run);
  ``sessionId`` = ``metadata["runtrail_session_id"]``, else LiteLLM's session
  (``litellm_session_id``), else the run ID; ``turnId`` = ``metadata["runtrail_turn_id"]``,
  else LiteLLM's trace ID; ``step`` = the call's number in the run (a retry keeps its step);
* a call → MODEL_REQUEST ``{"prompt": {"model", "messages", "tools", "params"}}``, then, if it
  succeeded, MODEL_RESPONSE ``{"message": <assistant text>, "raw": <the completion LiteLLM
  assembled, stream or not: choices with tool calls and finish reasons, usage>}`` and a
  TOOL_CALL per tool call the model asked for (its ID, name, parsed arguments);
* the tool results the next call of the run carries (``role: "tool"`` messages answering those
  IDs) → TOOL_RESULT in the asking call's step, then its STEP_END ``tool_use``; an answer
  without tool calls ends its step at once (``final_answer``);
* a failed call leaves its step open: the run's next call is its retry (MODEL_RETRY with the
  failure's text before its MODEL_REQUEST); a run that ends there ends ``error``;
* a run's first call → ``run.accepted`` + ``run.state_transitioned`` (received → executing);
  its end → ``run.succeeded``, or ``run.failed`` with the exception text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtrail.adapters.openai_agents_map import Emit, Identity, jsonable, parse_arguments

JsonDict = dict[str, Any]

RUN_ID_KEY = "runtrail_run_id"
SESSION_ID_KEY = "runtrail_session_id"
TURN_ID_KEY = "runtrail_turn_id"
#: Named runs held open at once; past it the oldest is forgotten (its end never came).
MAX_OPEN_RUNS = 10_000
_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class ToolAsk:
    """One tool call the model asked for."""

    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class Call:
    """One finished LiteLLM call, as the mapping needs it."""

    call_id: str
    who: Identity
    named: bool  # the caller named the run: it spans calls and ends by end_run
    model: str | None
    messages: Any
    tools: Any
    params: JsonDict
    response: Any = None  # the completion (JSON), None when the call failed
    error: str | None = None


def metadata_of(kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The caller's ``metadata=`` of a LiteLLM call (LiteLLM keeps it in ``litellm_params``)."""
    params = kwargs.get("litellm_params")
    meta = params.get("metadata") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping):
        meta = kwargs.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def call_id_of(kwargs: Mapping[str, Any]) -> str | None:
    """LiteLLM's ID of one call (its retries keep it)."""
    slo = kwargs.get("standard_logging_object")
    found = kwargs.get("litellm_call_id") or (
        slo.get("litellm_call_id") if isinstance(slo, Mapping) else None
    )
    return str(found) if found else None


def run_id_of(kwargs: Mapping[str, Any]) -> str | None:
    """The run a call belongs to: the caller's ``runtrail_run_id``, else the call itself."""
    named = metadata_of(kwargs).get(RUN_ID_KEY)
    return str(named) if named else call_id_of(kwargs)


def call_of(kwargs: Mapping[str, Any], response_obj: Any, error: BaseException | None) -> Call:
    """The :class:`Call` of a success (``error`` None) or failure hook's arguments."""
    slo = kwargs.get("standard_logging_object")
    slo = slo if isinstance(slo, Mapping) else {}
    meta = metadata_of(kwargs)
    call_id = call_id_of(kwargs) or str(slo.get("id") or "")
    run_id = run_id_of(kwargs) or call_id
    session = meta.get(SESSION_ID_KEY) or slo.get("session_id") or kwargs.get("litellm_session_id")
    turn = meta.get(TURN_ID_KEY) or slo.get("trace_id") or kwargs.get("litellm_trace_id")
    who = Identity(run_id, str(session or run_id), str(turn or call_id))
    params = slo.get("model_parameters")
    params = dict(params if isinstance(params, Mapping) else kwargs.get("optional_params") or {})
    tools = params.pop("tools", None) or kwargs.get("tools")
    messages = slo.get("messages")
    if not isinstance(messages, list):
        messages = kwargs.get("messages")
    response: Any = None
    text: str | None = None
    if error is None:
        response = slo.get("response") or kwargs.get("complete_streaming_response") or response_obj
    else:
        text = str(slo.get("error_str") or error or "the call failed")
    return Call(
        call_id=call_id,
        who=who,
        named=bool(meta.get(RUN_ID_KEY)),
        model=str(slo.get("model") or kwargs.get("model") or "") or None,
        messages=jsonable(messages),
        tools=jsonable(tools),
        params=jsonable(params),
        response=jsonable(response),
        error=text,
    )


def answer_text(response: Any) -> str | None:
    """The assistant text of a completion (its choices' contents, concatenated)."""
    parts = [
        str(message["content"])
        for message in _messages(response)
        if isinstance(message.get("content"), str)
    ]
    return "".join(parts) or None


def tool_asks(response: Any) -> list[ToolAsk]:
    """The tool calls a completion asks for, in order."""
    asks: list[ToolAsk] = []
    for message in _messages(response):
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping):
                fn = call.get("function") or {}
                name, arguments = str(fn.get("name")), parse_arguments(fn.get("arguments"))
                asks.append(ToolAsk(str(call.get("id")), name, arguments))
    return asks


def _messages(response: Any) -> list[Mapping[str, Any]]:
    choices = response.get("choices") if isinstance(response, Mapping) else None
    return [
        choice["message"]
        for choice in choices or ()
        if isinstance(choice, Mapping) and isinstance(choice.get("message"), Mapping)
    ]


def tool_results(messages: Any, asked: Mapping[str, str]) -> list[tuple[str, Any]]:
    """``(call ID, output)`` of the ``role: "tool"`` messages answering the ``asked`` IDs."""
    found: list[tuple[str, Any]] = []
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, Mapping) and message.get("role") == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id in asked and all(c != call_id for c, _ in found):
                found.append((call_id, message.get("content")))
    return found


@dataclass
class _Run:
    """The state of one run between its calls."""

    who: Identity
    step: int = 0
    step_open: bool = False
    answered: bool = False
    failed_attempts: int = 0
    last_error: str | None = None
    asked: dict[str, str] = field(default_factory=dict)  # call ID -> tool name, this step
    last_response_id: str | None = None


class CallMapper:
    """Turns the calls of each run, in the order they started, into events."""

    def __init__(self, policy_version: str = "litellm", max_open: int = MAX_OPEN_RUNS) -> None:
        self.policy_version = policy_version
        self.max_open = max(1, max_open)
        #: Named runs forgotten to stay under ``max_open`` (the logger counts them).
        self.evicted = 0
        self._runs: dict[str, _Run] = {}

    def record(self, call: Call) -> tuple[Identity, list[Emit]]:
        """The events of one finished call (and, for an unnamed run, of the run's end)."""
        out: list[Emit] = []
        run = self._runs.get(call.who.run_id)
        if run is None:
            run = self._open(call)
            goal = f"litellm:{call.model or 'model'}"
            out += [
                Emit("run.accepted", {"goalRef": goal, "policyVersion": self.policy_version}),
                Emit("run.state_transitioned", {"fromStatus": "received",
                     "toStatus": "executing", "reason": "first LiteLLM call"}),
            ]  # fmt: skip
        who = run.who
        if run.step_open and run.answered:
            for call_id, output in tool_results(call.messages, run.asked):
                data = {"callId": call_id, "toolName": run.asked[call_id], "output": output}
                out.append(Emit("TOOL_RESULT", data, run.step))
            out += self._end_step(run)
        elif run.step_open and run.failed_attempts:
            reason = (run.last_error or "the model call failed")[:_REASON_CHARS]
            out.append(Emit("MODEL_RETRY", {"attempt": run.failed_attempts, "reason": reason},
                            run.step))  # fmt: skip
        if not run.step_open:
            run.step += 1
            run.step_open, run.answered, run.failed_attempts, run.asked = True, False, 0, {}
        prompt = {"model": call.model, "messages": call.messages, "tools": call.tools,
                  "params": call.params}  # fmt: skip
        out.append(Emit("MODEL_REQUEST", {"prompt": prompt}, run.step))
        if call.error is not None:
            run.failed_attempts += 1
            run.last_error = call.error
        else:
            out += self._answered(run, call.response)
        if not call.named:
            out += self._finish(call.who.run_id)
        return who, out

    def end_run(self, run_id: str, error: str | None = None) -> tuple[Identity, list[Emit]] | None:
        """The end of a named run: its open step's STEP_END, then ``run.succeeded`` or
        ``run.failed`` (``error``, else the failure of a last call that was not retried)."""
        run = self._runs.get(run_id)
        if run is None:
            return None
        return run.who, self._finish(run_id, error)

    # --- helpers ----------------------------------------------------------------------------
    def _open(self, call: Call) -> _Run:
        while len(self._runs) >= self.max_open:  # dicts keep insertion order: oldest first
            del self._runs[next(iter(self._runs))]
            self.evicted += 1
        run = self._runs[call.who.run_id] = _Run(call.who)
        return run

    def _answered(self, run: _Run, response: Any) -> list[Emit]:
        run.answered = True
        if isinstance(response, Mapping) and response.get("id"):
            run.last_response_id = str(response["id"])
        out = [Emit("MODEL_RESPONSE", {"message": answer_text(response), "raw": response},
                    run.step)]  # fmt: skip
        asks = tool_asks(response)
        for ask in asks:
            run.asked[ask.call_id] = ask.name
            data = {"callId": ask.call_id, "toolName": ask.name, "arguments": ask.arguments}
            out.append(Emit("TOOL_CALL", data, run.step))
        if not asks:
            out += self._end_step(run)
        return out

    def _end_step(self, run: _Run) -> list[Emit]:
        if not run.step_open:
            return []
        run.step_open = False
        if run.failed_attempts and not run.answered:
            reason = "error"  # the step's model call failed and was not retried
        else:
            reason = "tool_use" if run.asked else "final_answer"
        return [Emit("STEP_END", {"reason": reason}, run.step)]

    def _finish(self, run_id: str, error: str | None = None) -> list[Emit]:
        run = self._runs.pop(run_id)
        if error is None and run.step_open and run.failed_attempts and not run.answered:
            error = run.last_error
        out = self._end_step(run)
        step = run.step or None
        if error is not None:
            out.append(Emit("run.failed", {"reason": error[:_REASON_CHARS]}, step))
        else:
            ref = f"litellm:{run.last_response_id or run_id}"
            out.append(Emit("run.succeeded", {"resultRef": ref}, step))
        return out
