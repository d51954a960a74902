"""Crash and resume over the real broker, with the scripted agent as a child process.

The agent's tools append to a side-effect ledger; the agent is SIGKILLed (by itself, at an exact
point) and run again as a new process with the same run ID. The ledger must show every side
effect exactly once, and the model delegate must be called only for steps after the crash.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.resume import idempotency_key
from tests.resume_support import TOKENS, CacheService, make_topics

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
EFFECTS = [f"effect-{n}" for n in range(1, 11)]


@pytest.fixture
def service(kafka_bootstrap: str, tmp_path: Path) -> Iterator[CacheService]:
    events, cache = make_topics(kafka_bootstrap, "crash")
    svc = CacheService(kafka_bootstrap, events, cache, tmp_path).start()
    try:
        yield svc
    finally:
        svc.stop()


class Agent:
    def __init__(self, service: CacheService, tmp_path: Path, run_id: str, tool: str) -> None:
        self.ledger = tmp_path / "ledger.txt"
        self.model_log = tmp_path / "model.log"
        self.invocations = tmp_path / "invocations.txt"
        self.base = [
            sys.executable, "-m", "tests.resume_agent",
            "--run-id", run_id, "--tool", tool, "--steps", "10",
            "--ledger", str(self.ledger), "--model-log", str(self.model_log),
            "--invocations", str(self.invocations),
            "--bootstrap", service.bootstrap, "--topic", service.events_topic,
            "--service", service.url, "--token", TOKENS["acme"],
            "--spool", str(tmp_path / "spool"),
        ]  # fmt: skip

    def run(self, tag: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, "--tag", tag, *extra], capture_output=True, text=True, timeout=120
        )

    def model_calls(self, tag: str) -> list[int]:
        lines = self.model_log.read_text().splitlines()
        return [int(n) for t, n in (line.split() for line in lines) if t == tag]

    def effects(self) -> list[str]:
        return [line.split()[0] for line in self.ledger.read_text().splitlines()]


def counters(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-2000:]
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def test_sigkill_after_step_6_then_rerun_repeats_no_side_effect(
    service: CacheService, tmp_path: Path
) -> None:
    agent = Agent(service, tmp_path, "run-crash-1", "append")
    first = agent.run("first", "--crash-after-step", "6")
    assert first.returncode == -9  # SIGKILL
    assert agent.effects() == EFFECTS[:6]

    second = counters(agent.run("second", "--resume"))
    assert agent.effects() == EFFECTS  # each side effect exactly once
    assert agent.model_calls("first") == [1, 2, 3, 4, 5, 6]
    assert agent.model_calls("second") == [7, 8, 9, 10]  # only steps after the crash
    assert (second["modelHits"], second["toolHits"]) == (6, 6)
    assert second["lookupFailures"] == 0


def test_kill_between_tool_call_and_result_non_idempotent_tool_needs_reconciling(
    service: CacheService, tmp_path: Path
) -> None:
    agent = Agent(service, tmp_path, "run-crash-2", "append")
    first = agent.run("first", "--crash-in-step", "7")
    assert first.returncode == -9
    assert agent.effects() == EFFECTS[:7]  # step 7's effect was taken, its result never sent

    halted = agent.run("second", "--resume")
    assert halted.returncode == 3, halted.stderr[-2000:]
    message = halted.stderr
    assert "outcome unknown" in message
    assert "'run-crash-2'" in message and "step 7" in message and "'call-7'" in message
    assert agent.effects() == EFFECTS[:7]  # not executed again

    third = counters(agent.run("third", "--resume", "--reconcile"))
    assert third["reconciled"] == 1
    assert agent.effects() == EFFECTS  # the reconciled outcome was used, nothing repeated
    assert agent.model_calls("first") == [1, 2, 3, 4, 5, 6, 7]
    assert agent.model_calls("second") == [7]  # the step whose outcome was unknown
    assert agent.model_calls("third") == [8, 9, 10]


def test_kill_between_tool_call_and_result_idempotent_tool_reruns_with_the_same_key(
    service: CacheService, tmp_path: Path
) -> None:
    agent = Agent(service, tmp_path, "run-crash-3", "put")
    assert agent.run("first", "--crash-in-step", "7").returncode == -9
    second = counters(agent.run("second", "--resume"))
    assert second["reexecuted"] == 1
    assert agent.effects() == EFFECTS  # exactly once: the tool de-duplicated by its key
    step7 = [
        line.split()[2]
        for line in agent.invocations.read_text().splitlines()
        if line.split()[1] == "7"
    ]
    assert step7 == [idempotency_key("run-crash-3", "call-7")] * 2
    assert agent.model_calls("second") == [7, 8, 9, 10]
