"""``ResumableToolExecutor``: side effects already taken never happen again (seed 000 §3.3).

For each call:

1. **Hit** — the recorded output is returned; the tool is not executed.
2. **Open intent** — the run recorded this call's TOOL_CALL but no TOOL_RESULT: it may have taken
   effect before the crash (seed 002, "Resume from state": reconcile incomplete intents before
   resuming). A tool declared *idempotent* is executed again with the **same idempotency key**
   (derived from the run ID and the original call ID, so the tool can de-duplicate); any other
   tool goes to the ``reconcile`` hook, whose outcome is published as the call's TOOL_RESULT —
   or, without a hook (or if it cannot tell), :class:`OutcomeUnknown` is raised, naming the
   run, step and call. The intent is found by the call's key (name and arguments) or, failing
   that, by the step: an open intent an earlier life left in the call's step and turn (the
   same call ID first, else one of a tool not declared idempotent) stands for *any* call of
   that step the cache does not hold. A model re-asked after a crash may answer with other
   arguments (or another call ID); the step's side effect may still have happened, so no
   tool of that step runs until the intent is reconciled.
3. **Untrusted miss** — the shared cache could not be reached, so nothing says whether the call
   ran in an earlier life of the run. Degrading to a real call is right for an idempotent tool
   or a run known to be fresh; for any other tool it could repeat a side effect, so it is
   treated like an open intent (reconcile, else OutcomeUnknown).
4. **Miss** — intent first (TOOL_CALL published and acknowledged), then the tool (with its
   idempotency key), then the outcome (TOOL_RESULT) and, on success only, the cache entry.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from runtrail.resume.cache import ResumeCache
from runtrail.resume.entry import Intent
from runtrail.resume.errors import OutcomeUnknown, ToolFailed
from runtrail.resume.keys import idempotency_key, intent_id, tool_key
from runtrail.resume.recorder import RunRecorder
from runtrail.resume.wrapper import CachedDelegate

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """One tool call as the agent issues it; ``idempotency_key`` is filled in by the executor."""

    tool_name: str
    arguments: Any = None
    call_id: str | None = None
    step: int | None = None
    turn_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a reconcile hook found out: the call's output, or the error it ended with."""

    output: Any = None
    error: str | None = None


class ToolExecutor(Protocol):
    """The agent's real tool executor: returns the output, raises on failure."""

    def execute(self, call: ToolInvocation) -> Any: ...


#: Given the open intent, the call's real outcome (looked up in the external system), or None
#: when it cannot be told.
ReconcileHook = Callable[[Intent], ToolOutcome | None]


class ResumableToolExecutor(CachedDelegate[ToolExecutor]):
    """See the module docstring."""

    def __init__(
        self,
        delegate: ToolExecutor,
        cache: ResumeCache,
        *,
        recorder: RunRecorder | None = None,
        idempotent: Collection[str] | Callable[[str], bool] = (),
        reconcile: ReconcileHook | None = None,
    ) -> None:
        super().__init__(delegate, cache, recorder)
        self.reconcile = reconcile
        self._idempotent = idempotent
        self.reexecuted = 0
        self.reconciled = 0

    def is_idempotent(self, tool_name: str) -> bool:
        declared = self._idempotent
        if callable(declared):
            return bool(declared(tool_name))
        return tool_name in declared

    def execute(self, call: ToolInvocation) -> Any:
        """The recorded output on a hit; else per the module docstring."""
        lookup = self.cache.lookup_tool(call.tool_name, call.arguments)
        if lookup.entry is not None:
            return lookup.entry.result
        if lookup.intent is not None:
            return self._unknown(
                call, lookup.intent, "its TOOL_CALL was recorded without a TOOL_RESULT"
            )
        pending = self._pending_in_step(call)
        if pending is not None:
            return self._unknown(
                call,
                pending,
                f"its TOOL_CALL was recorded without a TOOL_RESULT, so {call.tool_name} "
                f"(call {call.call_id!r}) in the same step must not run before it is reconciled",
            )
        if (
            not lookup.trusted
            and not self.cache.fresh_run
            and not self.is_idempotent(call.tool_name)
        ):
            step, turn = self._coordinates(call.step, call.turn_id)
            guess = Intent(
                self.cache.tenant,
                self.cache.run_id,
                intent_id(turn, step, call.call_id, call.tool_name),
                tool_key(call.tool_name, call.arguments),
                call.tool_name,
                call.call_id,
                call.arguments,
                step=step,
                turn_id=turn,
            )
            return self._unknown(
                call,
                guess,
                "the resume cache cannot be reached to tell whether it already ran",
                recorded=False,
            )
        if not lookup.trusted:
            log.warning(
                "run %s: resume cache unreachable; %s (call %s) runs for real (%s)",
                self.cache.run_id,
                call.tool_name,
                call.call_id,
                "idempotent" if self.is_idempotent(call.tool_name) else "fresh run",
            )
        return self._run(call)

    def _pending_in_step(self, call: ToolInvocation) -> Intent | None:
        """An earlier life's open intent in this call's step: the same call ID, else one of a
        tool not declared idempotent (see the module docstring)."""
        step, turn = self._coordinates(call.step, call.turn_id)
        pending = self.cache.inherited_intents(step, turn)
        if call.call_id is not None:
            for intent in pending:
                if intent.call_id == call.call_id:
                    return intent
        for intent in pending:
            if intent.tool_name is None or not self.is_idempotent(intent.tool_name):
                return intent
        return None

    # --- a real call ----------------------------------------------------------------------
    def _run(self, call: ToolInvocation) -> Any:
        step, turn = self._coordinates(call.step, call.turn_id)
        session = self.recorder.session_id if self.recorder is not None else None
        intent = self.cache.open_intent(
            call.tool_name,
            call.arguments,
            call_id=call.call_id,
            step=step,
            turn_id=turn,
            session_id=session,
        )
        if self.recorder is not None:
            self.recorder.tool_call(call.call_id, call.tool_name, call.arguments)
        return self._execute(call, intent)

    def _execute(self, call: ToolInvocation, intent: Intent) -> Any:
        """Run the tool under the intent's idempotency key; publish and record the outcome."""
        key = idempotency_key(self.cache.run_id, intent.call_id or intent.intent_id)
        try:
            output = self.delegate.execute(dataclasses.replace(call, idempotency_key=key))
        except Exception as exc:
            self._outcome(intent, ToolOutcome(error=f"{type(exc).__name__}: {exc}"))
            raise
        self._outcome(intent, ToolOutcome(output=output))
        return output

    def _outcome(self, intent: Intent, outcome: ToolOutcome) -> None:
        """Publish the TOOL_RESULT beside its intent; record it if it is a success."""
        if self.recorder is not None:
            self.recorder.tool_result(
                intent.call_id,
                intent.tool_name,
                output=outcome.output,
                error=outcome.error,
                step=intent.step,
                turn_id=intent.turn_id,
            )
        if outcome.error is None and intent.tool_name is not None:
            self.cache.record_tool(
                intent.tool_name,
                intent.arguments,
                outcome.output,
                call_id=intent.call_id,
                step=intent.step,
                turn_id=intent.turn_id,
            )
        self.cache.resolve_intent(intent)

    # --- an outcome nobody recorded ---------------------------------------------------------
    def _unknown(
        self, call: ToolInvocation, intent: Intent, reason: str, *, recorded: bool = True
    ) -> Any:
        if self.is_idempotent(intent.tool_name or call.tool_name):
            self.reexecuted += 1
            log.info(
                "run %s: %s (call %s, step %s) %s; idempotent, so executed again with the same "
                "idempotency key",
                intent.run_id,
                call.tool_name,
                intent.call_id,
                intent.step,
                reason,
            )
            if not recorded and self.recorder is not None:
                self.recorder.tool_call(intent.call_id, call.tool_name, call.arguments)
            return self._execute(call, intent)
        outcome = self.reconcile(intent) if self.reconcile is not None else None
        if outcome is None:
            raise OutcomeUnknown(
                run_id=intent.run_id,
                step=intent.step,
                call_id=intent.call_id,
                tool_name=intent.tool_name,
                reason=reason,
            )
        self.reconciled += 1
        if not recorded and self.recorder is not None:
            self.recorder.tool_call(intent.call_id, call.tool_name, call.arguments)
        self._outcome(intent, outcome)
        if outcome.error is not None:
            raise ToolFailed(intent.tool_name, intent.call_id, outcome.error)
        return outcome.output
