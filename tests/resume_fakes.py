"""Fakes for the *agent's* code only: a deterministic model and tools with a side-effect ledger.

They stand for the user's model client and tool executor (what the resumable decorators wrap);
the cache, the service, Kafka and the stores under test are always real.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtrail.resume import ModelResult, ToolInvocation


def step_of(prompt: Any) -> int:
    """The agent's step, read back from its prompt (two messages per finished step)."""
    return len(prompt["messages"]) // 2 + 1


class ScriptedModel:
    """Answers step N with a call of ``tool`` writing ``effect-N``; logs every real call."""

    def __init__(self, tool: str = "append", log: Path | None = None, tag: str = "") -> None:
        self.tool = tool
        self.log = log
        self.tag = tag
        self.calls: list[int] = []
        self.fail_next = False

    def _answer(self, prompt: Any) -> ModelResult:
        if self.fail_next:
            self.fail_next = False
            raise TimeoutError("the model timed out")
        step = step_of(prompt)
        self.calls.append(step)
        if self.log is not None:
            with self.log.open("a") as handle:
                handle.write(f"{self.tag} {step}\n")
                handle.flush()
                os.fsync(handle.fileno())
        call = {"id": f"call-{step}", "name": self.tool, "arguments": {"line": f"effect-{step}"}}
        return ModelResult(message=f"step {step}: calling {self.tool}", raw={"toolCall": call})

    def create(self, prompt: Any) -> ModelResult:
        return self._answer(prompt)

    def create_stream(self, prompt: Any, on_delta: Callable[[str], None]) -> ModelResult:
        result = self._answer(prompt)
        text = result.message or ""
        for i in range(0, len(text), 5):
            on_delta(text[i : i + 5])
        return ModelResult(message=None, raw=result.raw)


class LedgerTools:
    """``append`` (not idempotent) and ``put`` (idempotent by key) write to a ledger file.

    Every invocation is also noted (step and idempotency key) in ``invocations``. With
    ``crash_in_step`` the process kills itself right after the side effect of that step —
    between its TOOL_CALL and its TOOL_RESULT.
    """

    def __init__(
        self,
        ledger: Path,
        *,
        invocations: Path | None = None,
        crash_in_step: int | None = None,
        fail_steps: frozenset[int] = frozenset(),
    ) -> None:
        self.ledger = ledger
        self.invocations = invocations
        self.crash_in_step = crash_in_step
        self.fail_steps = fail_steps
        self.executed: list[tuple[str, int | None, str | None]] = []

    def _write(self, path: Path, line: str) -> None:
        with path.open("a") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []

    def execute(self, call: ToolInvocation) -> Any:
        self.executed.append((call.tool_name, call.step, call.idempotency_key))
        if self.invocations is not None:
            self._write(self.invocations, f"{call.tool_name} {call.step} {call.idempotency_key}")
        if call.step in self.fail_steps:
            raise ConnectionError("the tool's backend refused")
        line = call.arguments["line"]
        if call.tool_name == "put":
            if any(f"key={call.idempotency_key}" in ln for ln in self.lines()):
                return {"ok": True, "line": line, "deduplicated": True}
            self._write(self.ledger, f"{line} key={call.idempotency_key}")
        elif call.tool_name == "append":
            self._write(self.ledger, line)
        else:
            raise KeyError(call.tool_name)
        if call.step == self.crash_in_step:
            os.kill(os.getpid(), 9)  # SIGKILL: the effect is taken, the result never published
        return {"ok": True, "line": line}
