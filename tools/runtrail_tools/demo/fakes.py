"""The demo agent's model and tools: deterministic fakes standing for the user's own.

Only these are fake. The publisher, Kafka, the resumable decorators and every service are real:
the fakes just give the agent something reproducible to call, with no network. Tools with side
effects append to a ledger file — the "outside world" — which shows whether a resumed run
repeated any of them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtrail.resume import ModelResult, ToolInvocation
from runtrail_tools.demo.script import RunScript

MODEL_ID = "fake-llm-1"


def step_of(prompt: Any) -> int:
    """The agent's step, read back from its prompt (two messages per finished step)."""
    return len(prompt["messages"]) // 2 + 1


class ModelTimeout(TimeoutError):
    """The fake model's scripted mid-stream failure (the agent retries it)."""


class FakeModel:
    """Answers step N with the script's tool call N, then with a final answer.

    Streams the text in small deltas and reasons before answering (through ``on_reasoning``,
    which the agent publishes as MODEL_REASONING). A step in ``retry_steps`` fails once, after
    two deltas. Every real call is counted in ``calls`` (a resumed run's hits are not calls).
    """

    def __init__(self, script: RunScript, on_reasoning: Callable[[str], None] | None = None):
        self.script = script
        self.on_reasoning = on_reasoning
        self.calls: list[int] = []
        self._failed: set[int] = set()

    def _answer(self, prompt: Any) -> tuple[str, dict[str, Any]]:
        step = step_of(prompt)
        self.calls.append(step)
        size = len(str(prompt))
        usage = {"input_tokens": 40 + size // 8, "output_tokens": 12 + 3 * step}
        if step <= len(self.script.steps):
            planned = self.script.steps[step - 1]
            call = {"id": f"call-{step}", "name": planned.tool, "arguments": planned.arguments}
            text = f"Step {step}: I will call {planned.tool}."
            return text, {"model": MODEL_ID, "toolCall": call, "usage": usage}
        text = f"Done: {self.script.goal}."
        return text, {"model": MODEL_ID, "toolCall": None, "usage": usage}

    def create(self, prompt: Any) -> ModelResult:
        text, raw = self._answer(prompt)
        return ModelResult(message=text, raw=raw)

    def create_stream(self, prompt: Any, on_delta: Callable[[str], None]) -> ModelResult:
        step = step_of(prompt)
        if self.on_reasoning is not None:
            self.on_reasoning(f"step {step}: the goal is '{self.script.goal}'; ")
            self.on_reasoning("choosing the next action from the results so far.")
        text, raw = self._answer(prompt)
        for n, start in enumerate(range(0, len(text), 8)):
            if n == 2 and step in self.script.retry_steps and step not in self._failed:
                self._failed.add(step)
                raise ModelTimeout(f"the model stream timed out at step {step}")
            on_delta(text[start : start + 8])
        return ModelResult(message=None, raw=raw)


class LedgerTools:
    """The tools; those with side effects append one line per execution to the ledger.

    A line is ``run_id<TAB>call_id<TAB>tool<TAB>idempotency key``; the ledger is locked while
    written, so concurrent runs (and processes) never interleave lines.
    """

    def __init__(self, ledger: Path, run_id: str, side_effects: frozenset[str]) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.side_effects = side_effects

    def execute(self, call: ToolInvocation) -> Any:
        args = call.arguments or {}
        digest = hashlib.sha256(repr(sorted(args.items())).encode()).hexdigest()[:12]
        if call.tool_name in self.side_effects:
            self._record(call)
            return {"ok": True, "tool": call.tool_name, "receipt": digest}
        return {
            "tool": call.tool_name,
            "results": [f"{call.tool_name}:{digest}:{n}" for n in (1, 2)],
        }

    def _record(self, call: ToolInvocation) -> None:
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        line = f"{self.run_id}\t{call.call_id}\t{call.tool_name}\t{call.idempotency_key}\n"
        with self.ledger.open("a", encoding="utf-8") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            try:
                out.write(line)
                out.flush()
                os.fsync(out.fileno())
            finally:
                fcntl.flock(out, fcntl.LOCK_UN)


def ledger_effects(ledger: Path, run_id: str) -> list[str]:
    """The call IDs of the side effects the ledger holds for ``run_id``, in order."""
    if not ledger.exists():
        return []
    calls = []
    for line in ledger.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0] == run_id:
            calls.append(parts[1])
    return calls
