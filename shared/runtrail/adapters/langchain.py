"""``RuntrailCallbackHandler``: a LangChain / LangGraph run, published as seed 000's events.

Add it to a run's callbacks (``config={"callbacks": [handler]}``) and every chat-model call,
streamed token, retry and tool call of the run goes to the events topic through the agent's
:class:`~runtrail.publisher.Publisher` (which redacts, spools when the broker is down and counts
what it rejects). The mapping (run tree → run, session, turn, step) is in docs/ADAPTERS.md:

* the **run** is ``run_id`` if given, else the root LangChain run's ID;
* the **session** is ``session_id`` if given, else LangGraph's ``thread_id``, else the run;
* the **turn** is ``turn_id`` if given, else the root LangChain run's ID;
* the **step** is LangGraph's ``langgraph_step`` of the top-level graph node an event is under
  (STEP_END when that step's last node ends); outside a graph, each chat-model call opens a
  new step (STEP_END at the next call or at the end of the run).

The root run also moves the run's lifecycle for the projector: ``run.accepted`` (then
``executing``) when it starts — not when ``resumed`` — ``run.succeeded`` when it ends,
``run.failed`` when it raises. A run stopped by an *outcome unknown* gets no terminal event: it
is halted, not over. Nor does a re-run that replayed everything from the cache and published
nothing (the run may have ended in its earlier life).

LangGraph's human in the loop (:mod:`runtrail.adapters.langgraph_signals`): a graph that
stopped at ``interrupt()`` ends with ``run.input_required`` (the interrupt's ID and value), not
``run.succeeded``; the interrupted node and tool are not failed (no STEP_END, no TOOL_RESULT:
they run again on resume). The thread's next root run that resumes it (``Command(resume=...)``)
continues the *same* runtrail run — ``run.input_received`` with the resume value, then the rest
— when this handler recorded the wait, or, given the graph's ``checkpointer``, when the thread's
newest checkpoint records it (another process stopped there: the run goes on at the sequence it
recorded, after a ``run.resumed`` naming this process; :mod:`runtrail.adapters.langgraph_marks`).
A root run started from a named checkpoint
(a time-travel replay or fork) is a new run whose ``run.branched`` gives LangGraph's address of
that state, and the run that wrote it when the thread's checkpoints say so.

It never raises into the agent (every callback is guarded: failures are counted in
:attr:`RuntrailCallbackHandler.failures` and logged) and never blocks (publishing only enqueues),
except STEP_END with ``wait_for_acks`` (the resumable path: intents must be durable).
Runs that the resumable wrappers own (tag :data:`RESUMABLE_TAG`) are not published here: the
wrappers publish them, on a miss only, so a replayed step adds nothing to the record.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from runtrail.adapters import langgraph_marks as marks
from runtrail.adapters.langchain_json import (
    chat_prompt,
    jsonable,
    model_name,
    response_raw,
    response_text,
    text_prompt,
    token_text,
    tool_output,
)
from runtrail.adapters.langchain_recorder import AdapterRecorder
from runtrail.adapters.langgraph_signals import (
    Interrupt,
    checkpoint_address,
    raised_interrupts,
    resume_of,
    returned_interrupts,
)
from runtrail.resume.recorder import EventPublisher
from runtrail.resume.resumed import EVENT_TYPE as RESUMED
from runtrail.resume.resumed import resumed_data

log = logging.getLogger(__name__)

#: Tag of the runs the resumable wrappers publish themselves.
RESUMABLE_TAG = "runtrail:resumable"

#: Exceptions that stop a run without ending it (the run waits for reconciliation or input).
_SUSPENDING = ("OutcomeUnknown", "GraphInterrupt", "GraphBubbleUp", "NodeInterrupt")

F = TypeVar("F", bound=Callable[..., Any])


def _guarded(method: F) -> F:
    """Never into the agent: a failing callback is counted and logged, the agent goes on."""

    @functools.wraps(method)
    def wrapper(self: RuntrailCallbackHandler, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:
            self.failures += 1
            level = logging.DEBUG if self.failures > 1 else logging.WARNING
            log.log(level, "runtrail callback %s failed", method.__name__, exc_info=True)
            return None

    return cast(F, wrapper)


@dataclass
class _Run:
    """One runtrail run: the root LangChain run and its recorder."""

    root: UUID
    recorder: AdapterRecorder
    open_nodes: dict[int, int] = field(default_factory=dict)
    plain_step: int = 0
    plain_models: int = 0
    #: failed model attempts in the current step, and whether the next call retries one
    failed_attempts: int = 0
    retry_pending: bool = False
    #: the LangGraph thread the run is on (a wait is resumed on it)
    thread: str | None = None
    #: interrupts met since the run (re)started, by ID; and the input request they made
    interrupts: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    #: tool calls an interrupt stopped: their intent is published, they run again on resume
    suspended_calls: set[str] = field(default_factory=set)
    #: the thread's checkpoint this life of the run started from (None: a new thread)
    started_after: str | None = None


@dataclass
class _Node:
    """One LangChain run under a root: where its events go."""

    run: _Run
    step: int | None
    owned: bool = False
    top_node: bool = False
    call_id: str | None = None
    tool_name: str | None = None
    streamed: bool = False


def _is_suspension(error: BaseException) -> bool:
    return any(cls.__name__ in _SUSPENDING for cls in type(error).__mro__)


class RuntrailCallbackHandler(BaseCallbackHandler):
    """See the module docstring."""

    raise_error = False
    run_inline = True

    def __init__(
        self,
        publisher: EventPublisher,
        *,
        run_id: str | None = None,
        session_id: str | None = None,
        turn_id: str | None = None,
        lifecycle: bool = True,
        resumed: bool = False,
        goal_ref: str | None = None,
        policy_version: str = "langchain-adapter-1",
        recorder: AdapterRecorder | None = None,
        wait_for_acks: bool = False,
        checkpointer: Any | None = None,
    ) -> None:
        """``run_id``: one handler, one runtrail run (one root invocation); without it, each
        root invocation is its own run. ``resumed``: an earlier life of ``run_id`` opened the
        run, so no ``run.accepted``. ``recorder``: shared with the resumable wrappers.
        ``checkpointer``: the graph's (any LangGraph ``BaseCheckpointSaver``): each run's end
        is stamped on the thread's newest checkpoint (:mod:`runtrail.adapters.langgraph_marks`),
        so a resume in another process continues the run and a fork names its source run."""
        self.publisher = publisher
        self.run_id = run_id if run_id is not None else (recorder.run_id if recorder else None)
        self.session_id = session_id
        self.turn_id = turn_id
        self.lifecycle = lifecycle
        self.resumed = resumed
        self.goal_ref = goal_ref
        self.policy_version = policy_version
        self.wait_for_acks = wait_for_acks
        self.checkpointer = checkpointer
        self._fixed = recorder
        self._lock = threading.Lock()
        self._runs: dict[UUID, _Run] = {}
        #: runs stopped at a LangGraph interrupt, by thread: the thread's resume continues them
        self._waiting: dict[str, _Run] = {}
        self._nodes: dict[UUID, _Node] = {}
        self._rejected_closed = 0
        self._roots = 0
        #: callbacks that failed (logged; the agent never saw them)
        self.failures = 0

    @property
    def rejected(self) -> int:
        """Events the publisher refused (each also counted in its metrics, with the reason)."""
        with self._lock:
            runs = [*self._runs.values(), *self._waiting.values()]
        fixed = self._fixed.rejected if self._fixed else 0
        return self._rejected_closed + fixed + sum(r.recorder.rejected for r in runs)

    # --- the run tree -------------------------------------------------------------------------
    def _new_run(self, root: UUID, metadata: Mapping[str, Any]) -> _Run:
        run_id = self.run_id or str(root)
        self._roots += 1
        if self.run_id is not None and self._roots == 2:
            log.warning(
                "run %s: a second root invocation under one fixed run_id; after the first ended "
                "the run is terminal and the projector will stop at the second (leave run_id "
                "unset to make each invocation its own run of the session)",
                run_id,
            )
        thread = metadata.get("thread_id")
        session = self.session_id or (str(thread) if thread is not None else run_id)
        turn = self.turn_id or str(root)
        if self._fixed is not None:
            recorder = self._fixed
            recorder.session_id = recorder.session_id or session
            recorder.turn_id = recorder.turn_id or turn
        else:
            recorder = AdapterRecorder(self.publisher, run_id, session_id=session, turn_id=turn)
        return _Run(root, recorder, thread=None if thread is None else str(thread))

    # --- the thread's checkpoints: waits and lineage across processes ------------------------
    def _stored_wait(self, thread: str) -> marks.Wait | None:
        """The wait the thread's newest checkpoint records, when this handler did not record
        it itself (the resume comes to another process) and may continue it."""
        if self.checkpointer is None or self._fixed is not None:
            return None
        with self._lock:
            if thread in self._waiting:
                return None
        wait = marks.waiting_run(self.checkpointer, thread)
        if wait is not None and self.run_id is not None and wait.run_id != self.run_id:
            log.warning(
                "thread %s waits in run %s, but this handler records run %s: a new run",
                thread,
                wait.run_id,
                self.run_id,
            )
            return None
        if wait is not None and not callable(getattr(self.publisher, "set_next_sequence", None)):
            log.warning("run %s: the publisher cannot continue a run's sequence", wait.run_id)
            return None
        return wait

    def _continue(self, root: UUID, meta: Mapping[str, Any], wait: marks.Wait) -> _Run:
        """The waiting run of another process, continued here at its next sequence."""
        thread = str(meta["thread_id"])
        recorder = AdapterRecorder(
            self.publisher,
            wait.run_id,
            session_id=wait.session_id or self.session_id or thread,
            turn_id=wait.turn_id or self.turn_id or str(root),
        )
        if wait.step is not None:  # the step the wait stopped in goes on, as in one process
            recorder.begin_step(wait.step)
        cast(Any, self.publisher).set_next_sequence(wait.run_id, wait.next_sequence)
        recorder.emit(  # the wait was left by another process: this one says it took over
            RESUMED, resumed_data(after_sequence=wait.next_sequence - 1, at_step=wait.step)
        )
        run = _Run(root, recorder, thread=thread, request_id=wait.request_id)
        run.suspended_calls.update(wait.suspended_calls)
        return run

    def _note_start(self, run: _Run, meta: Mapping[str, Any], wait: marks.Wait | None) -> None:
        """Where this life of the run starts in the thread: a named checkpoint, else the
        thread's newest (its stamp, at the end, marks the checkpoints between as the run's)."""
        if self.checkpointer is None or run.thread is None:
            return
        named = checkpoint_address(meta)
        if named is not None:
            run.started_after = str(named["checkpoint_id"])
        elif wait is not None and run.recorder.run_id == wait.run_id:
            run.started_after = wait.checkpoint_id
        else:
            run.started_after = marks.newest_checkpoint_id(self.checkpointer, run.thread)

    def _stamp(self, run: _Run, waits: bool) -> None:
        """Stamp the run on the thread's newest checkpoint (and, when it waits, where its
        resume continues); a failure is counted and logged, never raised."""
        if self.checkpointer is None or run.thread is None:
            return
        recorder = run.recorder
        stamp: dict[str, Any] = {
            marks.RUN: recorder.run_id,
            marks.STARTED_AFTER: run.started_after,
        }
        peek = getattr(self.publisher, "next_sequence", None)
        if waits and run.request_id is not None and callable(peek):
            stamp[marks.NEXT_SEQUENCE] = int(peek(recorder.run_id))
            stamp[marks.REQUEST] = run.request_id
            stamp[marks.SESSION] = recorder.session_id
            stamp[marks.TURN] = recorder.turn_id
            stamp[marks.STEP] = recorder.step
            stamp[marks.SUSPENDED] = sorted(run.suspended_calls)
        try:
            marks.stamp(self.checkpointer, run.thread, stamp)
        except Exception:
            self.failures += 1
            log.warning(
                "run %s: could not stamp thread %s's checkpoint",
                recorder.run_id,
                run.thread,
                exc_info=True,
            )

    def _enter(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: Sequence[str] | None,
        metadata: Mapping[str, Any] | None,
        name: str,
        inputs: Any = None,
    ) -> _Node:
        """Place a starting LangChain run in the tree; open the runtrail run at a root (or
        continue the thread's waiting run, when the root resumes it)."""
        meta = metadata or {}
        opened: _Run | None = None
        continued: _Run | None = None
        resuming, answer = resume_of(inputs)
        thread = meta.get("thread_id")
        root = parent_run_id is None or parent_run_id not in self._nodes
        stored = self._stored_wait(str(thread)) if root and resuming and thread else None
        with self._lock:
            parent = self._nodes.get(parent_run_id) if parent_run_id is not None else None
            if parent is None:
                if resuming and thread is not None:
                    continued = self._waiting.pop(str(thread), None)
                    if continued is None and stored is not None:
                        continued = self._continue(run_id, meta, stored)
                if continued is not None:
                    continued.root = run_id
                    run = continued
                else:
                    run = opened = self._new_run(run_id, meta)
                self._runs[run_id] = run
                node = _Node(run, None)
            else:
                step = parent.step
                top = False
                graph_step = meta.get("langgraph_step")
                if parent.run.root == parent_run_id and isinstance(graph_step, int):
                    step, top = graph_step, True
                owned = parent.owned or RESUMABLE_TAG in (tags or ())
                node = _Node(parent.run, step, owned=owned, top_node=top)
            self._nodes[run_id] = node
        if parent is None:
            self._note_start(node.run, meta, stored)
        if opened is not None:
            self._open(opened, name, checkpoint_address(meta))
        if continued is not None:
            self._input_received(continued, answer)
        if node.top_node and node.step is not None:
            self._begin_graph_step(node.run, node.step)
        return node

    def _leave(self, run_id: UUID, error: BaseException | None) -> _Node | None:
        """Close a LangChain run: end its graph step when it is the step's last node; at the
        root, end the open step and the runtrail run."""
        with self._lock:
            node = self._nodes.pop(run_id, None)
        if node is None:
            return None
        run = node.run
        suspended = error is not None and _is_suspension(error)
        if error is not None:
            run.interrupts.update(raised_interrupts(error))
        if node.top_node and node.step is not None:
            with self._lock:
                left = run.open_nodes.get(node.step, 1) - 1
                run.open_nodes[node.step] = left
            if left <= 0 and not suspended:  # a suspended step goes on when resumed
                run.recorder.end_step("error" if error else "node_end", wait=self.wait_for_acks)
        if run.root == run_id:
            waits = self._close(run, error)
            self._stamp(run, waits)
            with self._lock:
                self._runs.pop(run_id, None)
                if waits and run.thread is not None:
                    self._waiting[run.thread] = run
                elif run.recorder is not self._fixed:
                    self._rejected_closed += run.recorder.rejected
        return node

    def _begin_graph_step(self, run: _Run, step: int) -> None:
        with self._lock:
            opened = run.open_nodes.get(step, 0)
            run.open_nodes[step] = opened + 1
        if opened == 0 and run.recorder.step != step:
            run.failed_attempts = 0
            run.recorder.begin_step(step)

    def _plain_model_step(self, node: _Node) -> int | None:
        """Outside a graph, each chat-model call opens a step (ending the one before)."""
        if node.step is not None:
            return node.step
        run = node.run
        if run.retry_pending:
            return run.plain_step or None  # a retry of the step's failed call
        if run.plain_models:
            run.recorder.end_step("model_call", wait=self.wait_for_acks)
        run.failed_attempts = 0
        run.plain_models += 1
        run.plain_step += 1
        run.recorder.begin_step(run.plain_step)
        return run.plain_step

    # --- the run's lifecycle ------------------------------------------------------------------
    def _open(self, run: _Run, name: str, branched_from: dict[str, Any] | None) -> None:
        if not self.lifecycle or self.resumed:
            return
        goal = self.goal_ref or f"langchain:{name}"
        run.recorder.emit("run.accepted", {"goalRef": goal, "policyVersion": self.policy_version})
        if branched_from is not None:
            # the source run, when the thread's stamps say which run wrote that state
            parent = self._source_run(branched_from)
            run.recorder.emit(
                "run.branched", {"parentRunId": parent, "branchedFrom": branched_from}
            )
        run.recorder.emit(
            "run.state_transitioned",
            {"fromStatus": "received", "toStatus": "executing", "reason": "langchain run started"},
        )

    def _source_run(self, address: Mapping[str, Any]) -> str | None:
        if self.checkpointer is None:
            return None
        try:
            return marks.writer_of(self.checkpointer, address)
        except Exception:
            self.failures += 1
            log.warning("could not read the lineage of checkpoint %s", address, exc_info=True)
            return None

    def _input_required(self, run: _Run, interrupts: list[Interrupt]) -> None:
        """One request for everything the graph waits for (the projection holds one wait)."""
        ids = [ident for ident, _ in interrupts]
        run.request_id = ",".join(ids)
        if len(interrupts) == 1:
            prompt = jsonable(interrupts[0][1])
        else:
            prompt = [{"id": ident, "value": jsonable(value)} for ident, value in interrupts]
        if self.lifecycle:
            run.recorder.emit("run.input_required", {"requestId": run.request_id, "prompt": prompt})

    def _input_received(self, run: _Run, answer: Any) -> None:
        request, run.request_id = run.request_id, None
        run.interrupts.clear()
        if self.lifecycle and request is not None:
            run.recorder.emit(
                "run.input_received", {"requestId": request, "input": jsonable(answer)}
            )

    def _close(self, run: _Run, error: BaseException | None) -> bool:
        """End the runtrail run with its root; whether it waits for input instead."""
        if run.plain_models:
            run.recorder.end_step("run_end", wait=self.wait_for_acks)
        if run.interrupts:
            self._input_required(run, list(run.interrupts.items()))
            return True
        if not self.lifecycle:
            return False
        if self.resumed and run.recorder.published == 0:
            # a re-run that replayed everything: the run may well have ended already, and a
            # second terminal event would stop its projection
            log.info(
                "run %s replayed wholly from the cache: no terminal event", run.recorder.run_id
            )
            return False
        if error is None:
            run.recorder.emit("run.succeeded", {"resultRef": f"langchain-run:{run.root}"})
        elif _is_suspension(error):
            log.info("run %s stopped (%s): no terminal event", run.recorder.run_id, error)
        else:
            reason = f"{type(error).__name__}: {error}"[:500]
            run.recorder.emit("run.failed", {"reason": reason})
        return False

    def _model_step(self, node: _Node) -> int | None:
        step = self._plain_model_step(node)
        node.run.retry_pending = False
        return step

    # --- chains (graphs, nodes) ---------------------------------------------------------------
    @_guarded
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or "chain"
        self._enter(run_id, parent_run_id, tags, metadata, str(name), inputs)

    @_guarded
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        node = self._nodes.get(run_id)
        if node is not None and node.run.root == run_id:
            node.run.interrupts.update(returned_interrupts(outputs))
        self._leave(run_id, None)

    @_guarded
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id, error)

    # --- models -------------------------------------------------------------------------------
    @_guarded
    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        node = self._enter(run_id, parent_run_id, tags, metadata, "chat_model")
        if node.owned:
            return
        params = kwargs.get("invocation_params") or {}
        name = model_name(params, metadata, _client_name(serialized))
        step = self._model_step(node)
        for batch in messages:
            node.run.recorder.emit(
                "MODEL_REQUEST", {"prompt": chat_prompt(name, batch, params)}, step=step
            )

    @_guarded
    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        node = self._enter(run_id, parent_run_id, tags, metadata, "llm")
        if node.owned:
            return
        params = kwargs.get("invocation_params") or {}
        name = model_name(params, metadata, _client_name(serialized))
        step = self._model_step(node)
        node.run.recorder.emit(
            "MODEL_REQUEST", {"prompt": text_prompt(name, prompts, params)}, step=step
        )

    @_guarded
    def on_llm_new_token(
        self, token: str | list[str | dict[str, Any]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        node = self._nodes.get(run_id)
        text = token_text(token)
        if node is None or node.owned or not text:
            return
        node.streamed = True
        node.run.recorder.emit("MODEL_RESPONSE", {"message": text}, step=self._step(node))

    @_guarded
    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        node = self._nodes.get(run_id)
        try:
            if node is not None and not node.owned:
                message = None if node.streamed else response_text(response)
                node.run.recorder.emit(
                    "MODEL_RESPONSE",
                    {"message": message, "raw": response_raw(response)},
                    step=self._step(node),
                )
        finally:
            self._leave(run_id, None)

    @_guarded
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A failed attempt: MODEL_RETRY, so consumers drop what it published (a retry, e.g.
        ``with_retry``, comes as a new call in the same step)."""
        node = self._nodes.get(run_id)
        if node is not None and not node.owned:
            run = node.run
            run.failed_attempts += 1
            run.retry_pending = True
            self._retry(node, run.failed_attempts, f"{type(error).__name__}: {error}")
        self._leave(run_id, error)

    @_guarded
    def on_retry(self, retry_state: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A provider-level retry inside one call (LangChain's retry decorator)."""
        node = self._nodes.get(run_id)
        if node is None or node.owned:
            return
        outcome = getattr(retry_state, "outcome", None)
        error = outcome.exception() if outcome is not None and outcome.failed else None
        reason = f"{type(error).__name__}: {error}" if error is not None else "retry"
        self._retry(node, int(getattr(retry_state, "attempt_number", 1) or 1), reason)

    def _retry(self, node: _Node, attempt: int, reason: str) -> None:
        node.run.recorder.emit(
            "MODEL_RETRY",
            {"attempt": max(1, attempt), "reason": reason[:500]},
            step=self._step(node),
        )

    # --- tools --------------------------------------------------------------------------------
    @_guarded
    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
        node = self._enter(run_id, parent_run_id, tags, metadata, name)
        if node.owned:
            return
        call_id = kwargs.get("tool_call_id")
        node.call_id = str(call_id) if call_id else str(run_id)
        node.tool_name = name
        if node.call_id in node.run.suspended_calls:  # its intent is already in the record
            node.run.suspended_calls.discard(node.call_id)
            return
        arguments = jsonable(inputs) if inputs is not None else input_str
        node.run.recorder.emit(
            "TOOL_CALL",
            {"callId": node.call_id, "toolName": name, "arguments": arguments},
            step=self._step(node),
        )

    @_guarded
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        node = self._nodes.get(run_id)
        try:
            if node is not None and not node.owned:
                result = {
                    "callId": node.call_id,
                    "toolName": node.tool_name,
                    "output": tool_output(output),
                }
                node.run.recorder.emit("TOOL_RESULT", result, step=self._step(node))
        finally:
            self._leave(run_id, None)

    @_guarded
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        node = self._nodes.get(run_id)
        if node is not None and not node.owned and _is_suspension(error):
            if node.call_id is not None:  # stopped by an interrupt: it runs again on resume
                node.run.suspended_calls.add(node.call_id)
        elif node is not None and not node.owned:
            node.run.recorder.emit(
                "TOOL_RESULT",
                {
                    "callId": node.call_id,
                    "toolName": node.tool_name,
                    "error": f"{type(error).__name__}: {error}"[:2000],
                },
                step=self._step(node),
            )
        self._leave(run_id, error)

    # --- other runs in the tree (retrievers): placed, not published ---------------------------
    @_guarded
    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._enter(run_id, parent_run_id, tags, metadata, "retriever")

    @_guarded
    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id, None)

    @_guarded
    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id, error)

    def _step(self, node: _Node) -> int | None:
        if node.step is not None:
            return node.step
        return node.run.plain_step or None


def _client_name(serialized: Mapping[str, Any] | None) -> str:
    ident = (serialized or {}).get("id")
    if isinstance(ident, list) and ident:
        return str(ident[-1])
    return str((serialized or {}).get("name") or "unknown-model")
