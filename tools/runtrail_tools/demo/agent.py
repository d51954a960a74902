"""The scripted agent: one run, through the resumable decorators and the real publisher.

The loop is what an agent runtime does: per step, ask the model (streamed, with reasoning and
a retry when the stream breaks), run the tool it asked for, end the step. The run's lifecycle
(accepted, plan, approval, cancellation, outcome) goes out as domain events. Every model and
tool call goes through :class:`ResumableModelClient` / :class:`ResumableToolExecutor`, so a run
resumed after a crash replays its finished steps from the resume-cache service and repeats no
side effect.

``python -m runtrail_tools.demo.agent`` runs one script in its own process: the demo uses it for the
run that crashes (a real SIGKILL) and for its resume (a new process).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtrail.config import Settings, load_settings
from runtrail.resume import (
    CacheSource,
    ModelResult,
    ResumableModelClient,
    ResumableToolExecutor,
    ResumeCache,
    RunRecorder,
    RunState,
    ToolInvocation,
)
from runtrail.resume.recorder import EventPublisher
from runtrail_tools.demo.fakes import FakeModel, LedgerTools, ModelTimeout
from runtrail_tools.demo.script import RunScript, script

TURN = "turn-1"
MAX_ATTEMPTS = 3


class TenantPublisher:
    """One :class:`~runtrail.publisher.Publisher` seen as a tenant's: the recorder's protocol,
    stamping the tenant on every event (one publisher, one metrics registry, many tenants)."""

    def __init__(self, publisher: Any, tenant: str) -> None:
        self._publisher = publisher
        self.tenant = tenant

    def publish(
        self,
        event_type: str,
        run_id: str,
        data: Any,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        step: int | None = None,
    ) -> str | None:
        event_id: str | None = self._publisher.publish(
            event_type,
            run_id,
            data,
            session_id=session_id,
            turn_id=turn_id,
            step=step,
            tenant_id=self.tenant,
        )
        return event_id

    def flush(self, timeout: float = 10.0) -> int:
        return int(self._publisher.flush(timeout))

    def acked_offsets(self) -> dict[int, int]:
        return dict(self._publisher.acked_offsets())


@dataclass
class AgentRun:
    """One run of a script: its ID, where it publishes, what it may consult."""

    script: RunScript
    run_id: str
    publisher: EventPublisher
    ledger: Path
    remote: CacheSource | None = None
    #: Resume an earlier life of the run (skip its opening events, consult the cache).
    resume: bool = False
    #: Die (SIGKILL, no cleanup) after this step ends: the script's crash point, first life.
    crash: bool = False
    #: Resume: the end of the run's partition at restart (read-your-writes across the crash).
    baseline: dict[int, int] | None = None
    #: Resume: told the run's recorded state before anything is published (continue sequences).
    on_resumed: Callable[[RunState], None] | None = None

    @property
    def session_id(self) -> str:
        return f"sess-{self.run_id}"

    def _domain(self, event_type: str, data: dict[str, Any], step: int | None = None) -> None:
        self.publisher.publish(
            event_type,
            self.run_id,
            data,
            session_id=self.session_id,
            turn_id=TURN if step is not None else None,
            step=step,
        )

    def _open(self) -> None:
        plan = json.dumps([s.tool for s in self.script.steps]).encode()
        digest = "sha256:" + hashlib.sha256(plan).hexdigest()
        artifact = f"plan-{self.run_id}"
        self._domain("run.accepted", {"goalRef": f"goal:{self.script.key}", "policyVersion": "v1"})
        self._domain(
            "artifact.stored",
            {"artifactId": artifact, "digest": digest, "mediaType": "application/json"},
        )
        self._domain("run.plan_proposed", {"planArtifactId": artifact, "digest": digest})
        self._domain("run.plan_validated", {"planArtifactId": artifact})

    def _approve(self, step: int, planned: Any) -> None:
        action = json.dumps({"tool": planned.tool, "arguments": planned.arguments}, sort_keys=True)
        digest = "sha256:" + hashlib.sha256(action.encode()).hexdigest()
        self._domain(
            "run.approval_required",
            {"actionDigest": digest, "reason": f"{planned.tool} changes production"},
            step,
        )
        self._domain(
            "run.approval_granted",
            {"actionDigest": digest, "approvedBy": f"oncall@{self.script.tenant}"},
            step,
        )

    def _ask(self, model: ResumableModelClient, prompt: Any) -> ModelResult:
        """A streamed model call; a broken stream is retried (the recorder publishes the
        MODEL_RETRY that makes consumers drop the failed attempt's output)."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            deltas: list[str] = []
            try:
                result = model.create_stream(prompt, deltas.append)
            except ModelTimeout:
                if attempt == MAX_ATTEMPTS:
                    raise
                continue
            if result.message is None and deltas:
                return ModelResult(message="".join(deltas), raw=result.raw)
            return result
        raise AssertionError("unreachable")

    def execute(self) -> int:
        """Run the script; the number of steps that ended. Never returns when it crashes."""
        s = self.script
        recorder = RunRecorder(
            self.publisher, self.run_id, session_id=self.session_id, turn_id=TURN
        )
        cache = ResumeCache(
            self.run_id,
            tenant=s.tenant,
            remote=self.remote,
            fresh_run=not self.resume,
            read_your_writes=self.publisher.acked_offsets,
        )
        if self.resume:
            state = cache.resume(self.baseline)
            if self.on_resumed is not None:
                self.on_resumed(state)
        side_effects = frozenset(st.tool for st in s.steps) - s.idempotent

        def reason(text: str) -> None:
            self.publisher.publish(
                "MODEL_REASONING",
                self.run_id,
                {"text": text},
                session_id=self.session_id,
                turn_id=TURN,
                step=recorder.step,
            )

        model = ResumableModelClient(FakeModel(s, on_reasoning=reason), cache, recorder=recorder)
        tools = ResumableToolExecutor(
            LedgerTools(self.ledger, self.run_id, side_effects),
            cache,
            recorder=recorder,
            idempotent=s.idempotent,
        )
        if not self.resume:
            self._open()
        messages: list[dict[str, Any]] = []
        step = 0
        while True:
            step += 1
            recorder.begin_step(step, turn_id=TURN)
            if s.approval_step == step and not self.resume:
                self._approve(step, s.steps[step - 1])
            prompt = {"model": "fake-llm-1", "temperature": 0, "messages": list(messages)}
            answer = self._ask(model, prompt)
            call = (answer.raw or {}).get("toolCall")
            if not call:
                recorder.step_end("final_answer")
                self._domain("run.succeeded", {"resultRef": f"result:{self.run_id}"}, step)
                break
            output = tools.execute(
                ToolInvocation(call["name"], call["arguments"], call["id"], step, TURN)
            )
            messages += [
                {"role": "assistant", "content": answer.message},
                {"role": "tool", "content": output},
            ]
            recorder.step_end("tool_use")
            if self.crash and step == s.crash_after_step:
                os.kill(os.getpid(), signal.SIGKILL)
            if s.cancel_after_step == step:
                self._domain(
                    "run.cancellation_requested",
                    {"requestedBy": f"user@{s.tenant}", "reason": "no longer needed"},
                    step,
                )
                self._domain("run.cancellation_acknowledged", {"reason": "cancelled by user"}, step)
                break
        self.publisher.flush(30.0)
        return step


# --- a run in its own process ---------------------------------------------------------------
def _remote(url: str | None, token_file: Path | None, tenant: str) -> CacheSource | None:
    if not url:
        return None
    from runtrail.resume.http_client import ServiceCacheClient

    tokens = json.loads(token_file.read_text(encoding="utf-8")) if token_file else {}
    return ServiceCacheClient(url, tokens.get(tenant, ""), wait_ms=20_000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one scripted demo run, in this process")
    parser.add_argument("--script", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--spool-dir", type=Path, required=True)
    parser.add_argument("--cache-url", help="resume-cache service API (http://host:port)")
    parser.add_argument("--tokens-file", type=Path)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--crash", action="store_true", help="die at the script's crash point")
    args = parser.parse_args(argv)

    from runtrail.publisher import Publisher
    from runtrail.resume.barrier import resume_barrier

    chosen = script(args.script)
    settings: Settings = load_settings(tenant=chosen.tenant, spool_dir=args.spool_dir)
    remote = _remote(args.cache_url, args.tokens_file, chosen.tenant)
    publisher = Publisher(settings)
    if args.resume:
        publisher.drain()  # the crashed process's accepted events go out before the barrier
    try:
        view = TenantPublisher(publisher, chosen.tenant)
        run = AgentRun(
            chosen,
            args.run_id,
            view,
            args.ledger,
            remote,
            resume=args.resume,
            crash=args.crash,
            baseline=resume_barrier(settings, args.run_id) if args.resume else None,
            on_resumed=lambda state: publisher.set_next_sequence(
                args.run_id, state.last_sequence + 1
            ),
        )
        steps = run.execute()
    finally:
        publisher.close()
        if remote is not None:
            remote.close()
    print(json.dumps({"runId": args.run_id, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
