"""A scripted agent for the crash-and-resume tests, run as a child process.

    python -m tests.resume_agent --run-id R --steps 10 --ledger L --model-log M \\
        --bootstrap B --topic T --service URL --token TOK [--resume] [--crash-after-step 6] \\
        [--crash-in-step 7] [--tool append|put] [--reconcile]
    python -m tests.resume_agent --run-id R --steps 3 --cache-file F ...   (in-process cache only)

Each step: the model (a deterministic fake standing for the user's model) answers with one tool
call; the tool (a fake standing for the user's tool) appends to a side-effect ledger; STEP_END.
The real parts are the resumable decorators, the publisher, Kafka and the resume-cache service.
Prints the counters as JSON on success; exit 3 with the error on stderr on "outcome unknown".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from runtrail.config import Settings
from runtrail.publisher import Publisher
from runtrail.resume import (
    Intent,
    OutcomeUnknown,
    ResumableModelClient,
    ResumableToolExecutor,
    ResumeCache,
    RunRecorder,
    ToolInvocation,
    ToolOutcome,
)
from runtrail.resume.barrier import resume_barrier
from runtrail.resume.http_client import ServiceCacheClient
from tests.resume_fakes import LedgerTools, ScriptedModel

TURN = "turn-1"


def reconcile_from_ledger(ledger: Path) -> Any:
    """The user's reconcile hook: look the effect up in the external system (the ledger)."""

    def reconcile(intent: Intent) -> ToolOutcome | None:
        line = (intent.arguments or {}).get("line")
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        if line in lines:
            return ToolOutcome(output={"ok": True, "line": line, "reconciled": True})
        return None  # cannot tell: the run stays halted

    return reconcile


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--run-id", required=True)
    p.add_argument("--tenant", default="acme")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ledger", type=Path, required=True)
    p.add_argument("--invocations", type=Path)
    p.add_argument("--model-log", type=Path, required=True)
    p.add_argument("--tag", default="run")
    p.add_argument("--tool", default="append")
    p.add_argument("--bootstrap")
    p.add_argument("--topic")
    p.add_argument("--spool", type=Path)
    p.add_argument("--service")
    p.add_argument("--token")
    p.add_argument("--cache-file", type=Path)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--reconcile", action="store_true")
    p.add_argument("--crash-after-step", type=int)
    p.add_argument("--crash-in-step", type=int)
    args = p.parse_args(argv)

    model = ScriptedModel(args.tool, args.model_log, args.tag)
    tools = LedgerTools(args.ledger, invocations=args.invocations, crash_in_step=args.crash_in_step)
    publisher: Publisher | None = None
    recorder: RunRecorder | None = None
    if args.cache_file is not None:
        cache = ResumeCache.load_json(args.cache_file, args.run_id, tenant=args.tenant)
    else:
        settings = Settings(
            bootstrap_servers=args.bootstrap,
            events_topic=args.topic,
            tenant=args.tenant,
            spool_dir=args.spool or args.ledger.parent / "spool",
        )
        publisher = Publisher(settings)
        recorder = RunRecorder(publisher, args.run_id, session_id=f"sess-{args.run_id}")
        remote = ServiceCacheClient(args.service, args.token, wait_ms=20_000)
        cache = ResumeCache(
            args.run_id, tenant=args.tenant, remote=remote, fresh_run=not args.resume
        )
        if args.resume:
            publisher.drain()  # the dead process's accepted events go out first
            state = cache.resume(resume_barrier(settings, args.run_id))
            publisher.set_next_sequence(args.run_id, state.last_sequence + 1)
    client = ResumableModelClient(model, cache, recorder=recorder)
    executor = ResumableToolExecutor(
        tools,
        cache,
        recorder=recorder,
        idempotent={"put"},
        reconcile=reconcile_from_ledger(args.ledger) if args.reconcile else None,
    )
    messages: list[dict[str, Any]] = []
    status = 0
    for step in range(1, args.steps + 1):
        if recorder is not None:
            recorder.begin_step(step, turn_id=TURN)
        prompt = {"model": "fake-1", "temperature": 0, "messages": list(messages)}
        result = client.create(prompt)
        call = result.raw["toolCall"]
        invocation = ToolInvocation(call["name"], call["arguments"], call["id"], step, TURN)
        try:
            output = executor.execute(invocation)
        except OutcomeUnknown as exc:
            sys.stderr.write(f"{exc}\n")
            if recorder is not None:
                recorder.step_end("halted: outcome unknown")
            status = 3
            break
        messages += [
            {"role": "assistant", "content": result.message},
            {"role": "tool", "content": output},
        ]
        if recorder is not None:
            recorder.step_end("tool_use")
        if step == args.crash_after_step:
            os.kill(os.getpid(), signal.SIGKILL)
    if args.cache_file is not None:
        cache.save_json(args.cache_file)
    if publisher is not None:
        publisher.close()
    counters = cache.counters
    print(
        json.dumps(
            {
                "modelHits": counters.model_hits,
                "modelMisses": counters.model_misses,
                "toolHits": counters.tool_hits,
                "toolMisses": counters.tool_misses,
                "lookupFailures": counters.lookup_failures,
                "reexecuted": executor.reexecuted,
                "reconciled": executor.reconciled,
                "modelCalls": model.calls,
            }
        )
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
