"""Crash-and-re-run through LangGraph (issue 13 item 1): a real LangGraph ReAct graph whose
process is SIGKILLed, re-run by a new process with the same run ID, against the real broker and
a running resume-cache service.

* Killed after step k: the re-run hits steps 1..k from the resume cache (the chat model is not
  called for them, their tools do not run), runs the rest, and the side-effect ledger (the
  tool appends a line per execution) holds every call exactly once.
* Killed inside a tool, after its side effect and before its result: the re-run raises
  OutcomeUnknown naming the call and does not run the tool again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.events import EventCodec
from runtrail_tools.demo.script import script
from tests.resume_support import TOKENS, CacheService, make_topics
from tests.support import consume_all

pytestmark = [pytest.mark.kafka]

PLAN = script("ledger")  # five side-effecting steps (append_ledger), tenant globex


@pytest.fixture
def service(kafka_bootstrap: str, tmp_path: Path) -> Iterator[CacheService]:
    events, cache = make_topics(kafka_bootstrap, "lgresume")
    svc = CacheService(kafka_bootstrap, events, cache, tmp_path).start()
    try:
        yield svc
    finally:
        svc.stop()


def life(service: CacheService, home: Path, run_id: str, tag: str, *flags: str) -> Any:
    tokens = home / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
    env |= {
        "RUNTRAIL_BOOTSTRAP_SERVERS": service.bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": service.events_topic,
    }
    return subprocess.run(
        [
            sys.executable, "-m", "runtrail_tools.demo.langgraph_agent", "--script", PLAN.key,
            "--run-id", run_id, "--ledger", str(home / "ledger.tsv"),
            "--spool-dir", str(home / f"spool-{tag}"), "--cache-url", service.url,
            "--tokens-file", str(tokens), *flags,
        ],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip


def ledger_calls(home: Path) -> list[str]:
    path = home / "ledger.tsv"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split("\t")[1] for line in lines]


def run_events(service: CacheService, run_id: str, expect: int) -> list[Any]:
    codec = EventCodec()
    messages = consume_all(service.bootstrap, service.events_topic, expect=expect, timeout=30)
    return [e for e in (codec.decode(m.value()).event for m in messages) if e.run_id == run_id]


def test_a_langgraph_run_killed_after_step_k_is_re_run_from_the_cache(
    service: CacheService, tmp_path: Path
) -> None:
    run_id, k = "lg-crash-1", 3
    first = life(service, tmp_path, run_id, "1", "--crash-after-step", str(k))
    assert first.returncode == -9, first.stderr[-3000:]  # SIGKILLed after step k
    assert ledger_calls(tmp_path) == [f"call-{n}" for n in range(1, k + 1)]

    second = life(service, tmp_path, run_id, "2")
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    # steps 1..k were hits: neither the model nor the tools were called for them
    assert summary["modelCalls"] == list(range(k + 1, len(PLAN.steps) + 2))
    assert (summary["modelHits"], summary["toolHits"]) == (k, k)
    assert summary["handlerFailures"] == 0
    # every side effect exactly once
    assert ledger_calls(tmp_path) == [f"call-{n}" for n in range(1, len(PLAN.steps) + 1)]

    # the record: each tool call's intent and outcome once, sequences without gap or reuse
    steps = len(PLAN.steps)
    events = run_events(service, run_id, expect=2 + 6 * steps + 3 + 1)
    calls = [e.data.call_id for e in events if e.type == "TOOL_CALL"]
    results = [e.data.call_id for e in events if e.type == "TOOL_RESULT"]
    assert calls == results == [f"call-{n}" for n in range(1, steps + 1)]
    assert sum(e.type == "MODEL_REQUEST" for e in events) == steps + 1
    assert [e.type for e in events].count("run.accepted") == 1  # the re-run did not reopen it
    (resumed,) = [e for e in events if e.type == "run.resumed"]  # ... but said it took over
    first_own = min(e.sequence for e in events if e.sequence > resumed.sequence)
    assert resumed.data.after_sequence == resumed.sequence - 1 < first_own
    assert resumed.data.cache_hits == 2 * k and resumed.data.pid not in (None, os.getpid())
    assert events[-1].type == "run.succeeded"
    sequences = sorted(e.sequence for e in events)
    assert sequences == list(range(1, len(events) + 1))
    assert {e.session_id for e in events} == {f"sess-{run_id}"}


def test_a_tool_killed_mid_call_is_an_outcome_unknown_on_re_run(
    service: CacheService, tmp_path: Path
) -> None:
    run_id = "lg-crash-2"
    first = life(service, tmp_path, run_id, "1", "--crash-in-step", "2")
    assert first.returncode == -9, first.stderr[-3000:]  # died inside step 2's tool
    assert ledger_calls(tmp_path) == ["call-1", "call-2"]  # its side effect happened

    second = life(service, tmp_path, run_id, "2")
    assert second.returncode == 3, second.stdout + second.stderr[-3000:]
    assert "outcome unknown" in second.stderr
    assert f"run {run_id!r}" in second.stderr and "call 'call-2'" in second.stderr
    assert ledger_calls(tmp_path) == ["call-1", "call-2"]  # never silently re-run

    events = run_events(service, run_id, expect=2 + 6 + 3 + 1)
    assert [e.data.call_id for e in events if e.type == "TOOL_CALL"] == ["call-1", "call-2"]
    assert [e.data.call_id for e in events if e.type == "TOOL_RESULT"] == ["call-1"]
    assert not any(e.type in {"run.succeeded", "run.failed"} for e in events)  # halted, not over
