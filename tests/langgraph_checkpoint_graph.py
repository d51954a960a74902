"""A small LangGraph graph on RuntrailCheckpointSaver, run as its own process by the tests.

``python -m tests.langgraph_checkpoint_graph STORE_URL TENANT THREAD start|resume|loop|rerun LOG``

``start`` runs plan -> review, where review interrupts for a human decision, and exits; ``resume``
(in a new process) answers the interrupt with ``Command(resume=...)`` and runs act. plan and act
append their name to LOG, a side effect the test counts: resuming must not re-run plan. The
state holds a datetime and a set, values JSON cannot carry, to show LangGraph's serializer is
what stores them. Each phase prints one JSON line: the process ID, the next nodes, the state.

``loop`` runs a counter graph for :data:`LOOP_STEPS` steps (one checkpoint each), so a test can
SIGKILL it mid-run; ``rerun`` (``invoke(None, …)``) continues it from its last checkpoint.
"""

from __future__ import annotations

import json
import operator
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver

PLANNED_AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


class State(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]
    tags: set[str]
    planned_at: datetime
    approved: bool


def build(saver: RuntrailCheckpointSaver, log: Path) -> Any:
    def side_effect(name: str) -> None:
        with log.open("a") as out:
            out.write(f"{name} {os.getpid()}\n")

    def plan(state: State) -> State:
        side_effect("plan")
        return {
            "notes": [f"planned {state['topic']}"],
            "tags": {"planned", state["topic"]},
            "planned_at": PLANNED_AT,
        }

    def review(state: State) -> State:
        decision = interrupt({"question": f"approve {state['topic']}?"})
        return {"approved": bool(decision), "notes": [f"reviewed: {decision}"]}

    def act(state: State) -> State:
        side_effect("act")
        return {"notes": ["acted" if state.get("approved") else "skipped"]}

    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("review", review)
    graph.add_node("act", act)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "review")
    graph.add_edge("review", "act")
    graph.add_edge("act", END)
    return graph.compile(checkpointer=saver)


LOOP_STEPS = 150


class Counter(TypedDict):
    count: int
    trail: Annotated[list[int], operator.add]


def build_loop(saver: RuntrailCheckpointSaver) -> Any:
    def step(state: Counter) -> dict[str, Any]:
        count = state["count"] + 1
        return {"count": count, "trail": [count]}

    def again(state: Counter) -> str:
        return "step" if state["count"] < LOOP_STEPS else END

    graph = StateGraph(Counter)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", again)
    return graph.compile(checkpointer=saver)


def _jsonable(state: dict[str, Any]) -> dict[str, Any]:
    out = dict(state)
    if "tags" in out:
        out["tags"] = sorted(out["tags"])
    if "planned_at" in out:
        out["planned_at"] = out["planned_at"].isoformat()
    return out


def main(argv: list[str]) -> int:
    url, tenant, thread, phase, log = argv
    with RuntrailCheckpointSaver.from_url(url, tenant_id=tenant) as saver:
        app = build_loop(saver) if phase in ("loop", "rerun") else build(saver, Path(log))
        config: dict[str, Any] = {"configurable": {"thread_id": thread}}
        config["recursion_limit"] = 10 * LOOP_STEPS
        if phase == "loop":
            app.invoke({"count": 0, "trail": []}, config)
        elif phase == "rerun":
            app.invoke(None, config)
        elif phase == "start":
            app.invoke({"topic": "refund", "notes": []}, config)
        elif phase == "resume":
            app.invoke(Command(resume=True), config)
        else:
            raise SystemExit(f"unknown phase {phase!r}")
        snapshot = app.get_state(config)
        types = {k: type(v).__name__ for k, v in snapshot.values.items()}
        print(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "next": list(snapshot.next),
                    "values": _jsonable(snapshot.values),
                    "types": types,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
