"""The demo's runs: what each scripted agent does, fixed in code so every demo is the same.

Two tenants, several runs at once: one that streams, reasons and retries; one that waits for
an approval before a side effect (through the command API when the stack has one); one
cancelled mid-way; one that crashes after a few steps and
is resumed by a new process, which must repeat no side effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ToolStep:
    """What the fake model asks for at one step."""

    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class RunScript:
    key: str
    tenant: str
    goal: str
    steps: tuple[ToolStep, ...]
    #: Steps whose first model attempt fails mid-stream (MODEL_RETRY, then a second attempt).
    retry_steps: frozenset[int] = frozenset()
    #: Ask for (and get) an approval before this step.
    approval_step: int | None = None
    #: Cancel the run once this step has ended.
    cancel_after_step: int | None = None
    #: The process dies (SIGKILL) once this step has ended; a new process resumes the run.
    crash_after_step: int | None = None
    #: Expected final projection status.
    expect_status: str = "succeeded"
    #: Tools safe to run twice (the others have side effects and must never repeat).
    idempotent: frozenset[str] = field(default_factory=lambda: frozenset({"search", "read"}))

    @property
    def expected_steps(self) -> int:
        """Steps that end: the tool steps (up to a cancel) plus the final answer's step."""
        if self.cancel_after_step is not None:
            return self.cancel_after_step
        return len(self.steps) + 1

    @property
    def side_effect_steps(self) -> list[int]:
        last = self.cancel_after_step or len(self.steps)
        return [
            n
            for n, step in enumerate(self.steps, start=1)
            if n <= last and step.tool not in self.idempotent
        ]


def _append(n: int) -> ToolStep:
    return ToolStep("append_ledger", {"entry": f"invoice-{n:03d}", "amount": 100 + n})


SCRIPTS: tuple[RunScript, ...] = (
    RunScript(
        key="research",
        tenant="acme",
        goal="summarise the incident reports of last week",
        steps=(
            ToolStep("search", {"query": "incident reports last week"}),
            ToolStep("read", {"doc": "INC-2041"}),
            ToolStep("write_file", {"path": "summary.md", "content": "3 incidents, 1 open"}),
        ),
        retry_steps=frozenset({2}),
    ),
    # With a command API in the stack this run is driven by commands instead, from its first
    # event (runtrail_tools.demo.approval): its approval comes from `runtrail command approve`.
    RunScript(
        key="deploy",
        tenant="acme",
        goal="ship release 1.4.2 to production",
        steps=(
            ToolStep("search", {"query": "release 1.4.2 changelog"}),
            ToolStep("deploy", {"service": "billing", "version": "1.4.2"}),
        ),
        approval_step=2,
    ),
    RunScript(
        key="report",
        tenant="globex",
        goal="draft the quarterly report",
        steps=(
            ToolStep("search", {"query": "Q3 revenue"}),
            ToolStep("write_file", {"path": "q3.md", "content": "draft"}),
            ToolStep("write_file", {"path": "q3.md", "content": "final"}),
            ToolStep("send_email", {"to": "board@globex.example", "subject": "Q3"}),
        ),
        cancel_after_step=2,
        expect_status="cancelled",
    ),
    RunScript(
        key="ledger",
        tenant="globex",
        goal="book this month's five invoices",
        steps=tuple(_append(n) for n in range(1, 6)),
        retry_steps=frozenset({4}),
        crash_after_step=3,
    ),
)


#: The runs of ``runtrail demo --framework langgraph``: the scripts a plain ReAct graph plays
#: (no approval or cancellation; LangGraph's own retries are not scripted), one per tenant,
#: the ledger run crashing and re-run.
LANGGRAPH_SCRIPTS: tuple[RunScript, ...] = tuple(
    replace(s, retry_steps=frozenset()) for s in SCRIPTS if s.key in {"research", "ledger"}
)


def scripts_for(framework: str) -> tuple[RunScript, ...]:
    """The demo's runs for an agent framework (``scripted`` or ``langgraph``)."""
    return LANGGRAPH_SCRIPTS if framework == "langgraph" else SCRIPTS


def script(key: str) -> RunScript:
    for candidate in SCRIPTS:
        if candidate.key == key:
            return candidate
    raise KeyError(f"no demo script {key!r} (known: {', '.join(s.key for s in SCRIPTS)})")


def tenants() -> list[str]:
    return sorted({s.tenant for s in SCRIPTS})
