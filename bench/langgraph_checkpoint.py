"""Cost of RuntrailCheckpointSaver per graph step, against LangGraph's InMemorySaver.

    python -m bench.langgraph_checkpoint [--url file:///tmp/x | postgresql://…] [--steps 200]

Each step is what the Pregel loop does per super-step: one ``put`` (two channels changed) and
one ``put_writes`` (two writes); then ``get_tuple`` of the thread's latest checkpoint, which is
what a graph does when it is invoked again on a thread. Prints milliseconds per call.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver


def measure(saver: BaseCheckpointSaver[Any], steps: int) -> tuple[float, float]:
    """(ms per put + put_writes, ms per get_tuple of the latest)."""
    config: Any = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
    version: Any = None
    start = time.perf_counter()
    for step in range(steps):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [f"m{i}" for i in range(step % 20)], "n": step}
        checkpoint["channel_versions"] = {"messages": version, "n": version}
        config = saver.put(
            config, checkpoint, {"source": "loop", "step": step}, checkpoint["channel_versions"]
        )
        saver.put_writes(config, [("messages", "next"), ("n", step + 1)], f"task-{step}")
    put_ms = (time.perf_counter() - start) * 1000 / steps
    reads = 50
    start = time.perf_counter()
    for _ in range(reads):
        saver.get_tuple({"configurable": {"thread_id": "bench"}})
    return put_ms, (time.perf_counter() - start) * 1000 / reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="session store URL (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    url = args.url or "file://" + tempfile.mkdtemp(prefix="rt-lg-bench-")
    savers: list[tuple[str, BaseCheckpointSaver[Any]]] = [
        ("InMemorySaver", InMemorySaver()),
        (f"RuntrailCheckpointSaver[{url.split(':')[0]}]", RuntrailCheckpointSaver.from_url(url)),
    ]
    for name, saver in savers:
        put_ms, get_ms = measure(saver, args.steps)
        print(
            f"{name}: put+put_writes {put_ms:.2f} ms/step, "
            f"get_tuple (latest of {args.steps}) {get_ms:.2f} ms"
        )


if __name__ == "__main__":
    main()
