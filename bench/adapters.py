"""Overhead of the LangChain/LangGraph adapter per event, against the same agent without it.

    python -m bench.adapters --runs 300 [--bootstrap-servers host:port]

The agent is a LangGraph ReAct graph (an agent node over a deterministic chat model of the
bench's own, a ToolNode with one tool; two model calls and one tool call per invocation). It
runs ``--runs`` invocations three ways, each after a warm-up:

* **bare** — no callbacks: the baseline;
* **handler, discarding sink** — ``RuntrailCallbackHandler`` mapping every callback to events
  that go nowhere: the adapter's own cost;
* **handler + Publisher** — the handler publishing through a real :class:`Publisher` to a fresh
  topic on the broker (validated, redacted, encoded, produced): what a user pays.

Reported: wall and CPU seconds (all threads, so the publisher's background thread counts), the
events published, the overhead per event ((with - bare) / events) and the ratio with / bare.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from bench.harness import broker, create_topic, delete_topic
from runtrail.adapters.langchain import RuntrailCallbackHandler
from runtrail.config import Settings


class EchoModel(BaseChatModel):
    """Asks for one tool call, then answers with the tool's result."""

    @property
    def _llm_type(self) -> str:
        return "bench-echo"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            message = AIMessage(content=f"the answer is {last.content}")
        else:
            call = {"name": "square", "args": {"x": len(messages)}, "id": f"c{len(messages)}"}
            message = AIMessage(content="computing", tool_calls=[call])
        message.usage_metadata = {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def square(x: int) -> int:
    """Square a number."""
    return x * x


def graph() -> Any:
    model = EchoModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([square]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


class Discard:
    """A publisher that counts and drops: the handler's mapping cost without publishing."""

    def __init__(self) -> None:
        self.events = 0

    def publish(self, event_type: str, run_id: str, data: Any, **kwargs: Any) -> str:
        self.events += 1
        return "discarded"

    def flush(self, timeout: float = 0.0) -> int:
        return 0

    def acked_offsets(self) -> dict[int, int]:
        return {}


def timed(app: Any, runs: int, handlers: list[BaseCallbackHandler]) -> tuple[float, float]:
    """Wall and CPU seconds of ``runs`` invocations (after a warm-up of a tenth)."""
    for _ in range(max(1, runs // 10)):
        app.invoke({"messages": [("user", "go")]}, config={"callbacks": list(handlers)})
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(runs):
        app.invoke({"messages": [("user", "go")]}, config={"callbacks": list(handlers)})
    return time.perf_counter() - wall, time.process_time() - cpu


def row(name: str, wall: float, cpu: float, events: int, bare: tuple[float, float]) -> str:
    if not events:
        return f"{name:<28} {wall:8.3f} s wall {cpu:8.3f} s cpu"
    per_wall = (wall - bare[0]) / events * 1e6
    per_cpu = (cpu - bare[1]) / events * 1e6
    return (
        f"{name:<28} {wall:8.3f} s wall {cpu:8.3f} s cpu  {events:7d} events  "
        f"+{per_wall:7.1f} µs/event wall (x{wall / bare[0]:.2f})  "
        f"+{per_cpu:7.1f} µs/event cpu (x{cpu / bare[1]:.2f})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument(
        "--bootstrap-servers",
        "--bootstrap",
        dest="bootstrap",
        help="a running broker (else one is started)",
    )
    args = parser.parse_args(argv)
    from runtrail.publisher import Publisher

    app = graph()
    bare = timed(app, args.runs, [])
    sink = Discard()
    mapped = timed(app, args.runs, [RuntrailCallbackHandler(sink)])
    mapped_events = sink.events * args.runs // (args.runs + max(1, args.runs // 10))
    with broker(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, 3, prefix="bench-adapter")
        try:
            with tempfile.TemporaryDirectory() as spool:
                settings = Settings(
                    bootstrap_servers=bootstrap, events_topic=topic, spool_dir=Path(spool)
                )
                with Publisher(settings) as publisher:
                    handler = RuntrailCallbackHandler(publisher)
                    wall, cpu = timed(app, args.runs, [handler])
                    start = time.perf_counter()
                    publisher.flush(60.0)
                    wall += time.perf_counter() - start
                    sent = publisher.stats()
        finally:
            delete_topic(bootstrap, topic)
    print(f"LangGraph ReAct agent, {args.runs} invocations (2 model calls + 1 tool call each)")
    print(row("bare (no callbacks)", *bare, 0, bare))
    print(row("handler, discarding sink", *mapped, mapped_events, bare))
    print(row("handler + Publisher", wall, cpu, mapped_events, bare))
    print(f"publisher stats: {sent}")


if __name__ == "__main__":
    main()
