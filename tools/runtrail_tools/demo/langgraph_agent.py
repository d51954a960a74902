"""The demo's LangGraph agent: a real LangGraph graph driven through runtrail's LangChain adapter.

The graph is the common ReAct shape — an ``agent`` node (a chat model) and a ``tools`` node
(LangGraph's ``ToolNode``), looping until the model answers without a tool call. Only the chat
model and the tools' bodies are the demo's own (deterministic, no network); LangGraph, the
adapter (:class:`~runtrail.adapters.langchain_resumable.ResumableRun`: the callback handler and
the resumable wrappers), the publisher, Kafka and the services are real.

``python -m runtrail_tools.demo.langgraph_agent`` runs one script in its own process: the demo uses it
for the run that crashes (a real SIGKILL after a step, or inside a tool) and for its re-run.
Exit 0 with a JSON summary; exit 3 when a tool's outcome is unknown (the run halts).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import ConfigDict, Field

from runtrail.adapters.langchain_resumable import ResumableRun, current_tool_call, open_run
from runtrail.resume import OutcomeUnknown, ToolInvocation
from runtrail_tools.demo.fakes import MODEL_ID, LedgerTools
from runtrail_tools.demo.script import RunScript, script

EXIT_OUTCOME_UNKNOWN = 3


class ScriptedChatModel(BaseChatModel):
    """Answers step N (N-1 tool results so far) with the script's tool call N, then with the
    final answer. ``calls`` lists the steps it was really called for (hits are not calls)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    plan: RunScript
    calls: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "runtrail-demo-scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": MODEL_ID}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        step = 1 + sum(isinstance(m, ToolMessage) for m in messages)
        self.calls.append(step)
        usage = {"input_tokens": 40 + 9 * len(messages), "output_tokens": 12 + 3 * step}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        if step <= len(self.plan.steps):
            planned = self.plan.steps[step - 1]
            call = {"name": planned.tool, "args": dict(planned.arguments), "id": f"call-{step}"}
            message = AIMessage(
                content=f"Step {step}: I will call {planned.tool}.",
                tool_calls=[call],
                usage_metadata=usage,
            )
        else:
            message = AIMessage(
                content=f"Done: {self.plan.goal}.",
                usage_metadata=usage,
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


class LedgerTool(BaseTool):
    """One of the script's tools; those with side effects append a line to the ledger (the
    "outside world"). ``crash_in_step``: die (SIGKILL) right after that step's side effect,
    before its result is recorded — the outcome the re-run cannot know."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    ledger: LedgerTools
    crash_in_step: int | None = None
    args_schema: Any = Field(
        default_factory=lambda: {"type": "object", "properties": {}, "additionalProperties": True}
    )

    def _run(self, *args: Any, **arguments: Any) -> Any:
        arguments.pop("run_manager", None)
        current = current_tool_call()
        call = current if current is not None else ToolInvocation(self.name, arguments)
        output = self.ledger.execute(call)
        if self.crash_in_step is not None and call.call_id == f"call-{self.crash_in_step}":
            os.kill(os.getpid(), signal.SIGKILL)
        return output


class CrashAfterStep(BaseCallbackHandler):
    """Kills the process (SIGKILL, no cleanup) once the ``tools`` node of script step ``step``
    has ended — after runtrail's handler (listed before it) has published and acknowledged its
    STEP_END."""

    raise_error = True
    run_inline = True

    def __init__(self, step: int) -> None:
        self.step = step
        self._tools_runs: set[UUID] = set()
        self._ended = 0

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if (metadata or {}).get("langgraph_node") == "tools" and kwargs.get("name") == "tools":
            self._tools_runs.add(run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self._tools_runs:
            self._ended += 1
            if self._ended == self.step:
                os.kill(os.getpid(), signal.SIGKILL)


def build_graph(
    run: ResumableRun, plan: RunScript, model: BaseChatModel, tools: list[BaseTool]
) -> Any:
    """The ReAct graph over the run's resumable model and tools."""
    chat = run.chat_model(model)
    wrapped = run.tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [chat.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(wrapped))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def script_tools(
    plan: RunScript, ledger: Path, run_id: str, crash_in_step: int | None = None
) -> list[BaseTool]:
    side_effects = frozenset(s.tool for s in plan.steps) - plan.idempotent
    body = LedgerTools(ledger, run_id, side_effects)
    names = sorted({s.tool for s in plan.steps})
    return [
        LedgerTool(
            name=n, description=f"the demo's {n} tool", ledger=body, crash_in_step=crash_in_step
        )
        for n in names
    ]


def drive(
    run: ResumableRun,
    plan: RunScript,
    ledger: Path,
    *,
    crash_after_step: int | None = None,
    crash_in_step: int | None = None,
) -> tuple[dict[str, Any], ScriptedChatModel]:
    """Run the script's graph to its end; the final state and the model (its real calls)."""
    model = ScriptedChatModel(plan=plan)
    graph = build_graph(run, plan, model, script_tools(plan, ledger, run.run_id, crash_in_step))
    extra: list[BaseCallbackHandler] = []
    if crash_after_step is not None:
        extra.append(CrashAfterStep(crash_after_step))
    session = f"sess-{run.run_id}"
    config = run.config(callbacks=extra, configurable={"thread_id": session}, recursion_limit=100)
    state = graph.invoke({"messages": [("user", plan.goal)]}, config=config)
    return dict(state), model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one demo script through a LangGraph agent")
    parser.add_argument("--script", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--spool-dir", type=Path, required=True)
    parser.add_argument("--cache-url", required=True, help="resume-cache service API")
    parser.add_argument("--tokens-file", type=Path, required=True)
    parser.add_argument("--crash", action="store_true", help="die at the script's crash point")
    parser.add_argument("--crash-after-step", type=int, help="die once this step has ended")
    parser.add_argument("--crash-in-step", type=int, help="die inside this step's tool")
    parser.add_argument("--resume", action="store_true", help="accepted; a re-run is detected")
    args = parser.parse_args(argv)

    from runtrail.config import load_settings
    from runtrail.publisher import Publisher
    from runtrail.resume.http_client import ServiceCacheClient

    plan = script(args.script)
    settings = load_settings(tenant=plan.tenant, spool_dir=args.spool_dir)
    tokens = json.loads(args.tokens_file.read_text(encoding="utf-8"))
    remote = ServiceCacheClient(args.cache_url, tokens.get(plan.tenant, ""), wait_ms=20_000)
    publisher = Publisher(settings)
    after = args.crash_after_step or (plan.crash_after_step if args.crash else None)
    try:
        run = open_run(
            publisher,
            settings,
            args.run_id,
            remote,
            session_id=f"sess-{args.run_id}",
            idempotent=plan.idempotent,
        )
        try:
            state, model = drive(
                run, plan, args.ledger, crash_after_step=after, crash_in_step=args.crash_in_step
            )
        except OutcomeUnknown as exc:
            sys.stderr.write(f"{exc}\n")
            return EXIT_OUTCOME_UNKNOWN
        publisher.flush(30.0)
    finally:
        publisher.close()
        remote.close()
    counters = run.cache.counters
    print(
        json.dumps(
            {
                "runId": args.run_id,
                "modelCalls": model.calls,
                "modelHits": counters.model_hits,
                "toolHits": counters.tool_hits,
                "messages": len(state["messages"]),
                "handlerFailures": run.handler.failures,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
