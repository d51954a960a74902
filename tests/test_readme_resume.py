"""The "resume it in a new process" example, executed exactly as written:
a scripted agent is SIGKILLed after step 2 of 4; its code block, extracted from
docs/RESUME.md, resumes the run against the real broker and a running resume-cache service; the
agent's loop then finishes it. Every side effect happens once, the model is called only for the
steps after the crash, and the run's sequences go on without a gap or a reused number."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.events import EventCodec
from runtrail.resume import ToolInvocation
from tests import readme_blocks as blocks
from tests.resume_fakes import LedgerTools, ScriptedModel
from tests.resume_support import TOKENS, CacheService, make_topics
from tests.support import consume_all

pytestmark = [pytest.mark.kafka]

README = blocks.README
MARKER = "<!-- tested as written by tests/test_readme_resume.py -->"
RUN = "run-readme-1"
STEPS = 4


def readme_block() -> str:
    return blocks.readme_block(MARKER, what="resume example")


@pytest.fixture
def service(kafka_bootstrap: str, tmp_path: Path) -> Iterator[CacheService]:
    events, cache = make_topics(kafka_bootstrap, "readme")
    svc = CacheService(kafka_bootstrap, events, cache, tmp_path).start()
    try:
        yield svc
    finally:
        svc.stop()


def test_the_readme_resume_example_runs_as_written(
    service: CacheService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, model_log = tmp_path / "ledger.txt", tmp_path / "model.log"
    first = subprocess.run(
        [
            sys.executable, "-m", "tests.resume_agent", "--run-id", RUN, "--steps", str(STEPS),
            "--ledger", str(ledger), "--model-log", str(model_log), "--tag", "first",
            "--bootstrap", service.bootstrap, "--topic", service.events_topic,
            "--service", service.url, "--token", TOKENS["acme"],
            "--spool", str(tmp_path / "spool-1"), "--crash-after-step", "2",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert first.returncode == -9, first.stderr[-2000:]  # SIGKILLed after step 2

    for name, value in {
        "RUNTRAIL_BOOTSTRAP_SERVERS": service.bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": service.events_topic,
        "RUNTRAIL_TENANT": "acme",
        "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool-2"),
        "RUN_ID": RUN,
        "RESUME_CACHE_URL": service.url,
        "RESUME_CACHE_TOKEN": TOKENS["acme"],
    }.items():
        monkeypatch.setenv(name, value)
    my_model = ScriptedModel("append", model_log, "second")
    namespace: dict[str, Any] = {"my_model": my_model, "my_tools": LedgerTools(ledger)}
    exec(compile(readme_block(), str(README), "exec"), namespace)  # the README, as written

    # the agent's loop, as the README says: from step 1, with `model`, `tools`, `recorder`
    model, tools, recorder = namespace["model"], namespace["tools"], namespace["recorder"]
    messages: list[dict[str, Any]] = []
    for step in range(1, STEPS + 1):
        recorder.begin_step(step, turn_id="turn-1")
        result = model.create({"model": "fake-1", "temperature": 0, "messages": list(messages)})
        call = result.raw["toolCall"]
        output = tools.execute(
            ToolInvocation(call["name"], call["arguments"], call["id"], step, "turn-1")
        )
        messages += [
            {"role": "assistant", "content": result.message},
            {"role": "tool", "content": output},
        ]
        recorder.step_end("tool_use")
    namespace["publisher"].close()

    effects = [line.split()[0] for line in ledger.read_text().splitlines()]
    assert effects == [f"effect-{n}" for n in range(1, STEPS + 1)]  # each exactly once
    assert my_model.calls == [3, 4]  # steps 1 and 2 were hits: no model call
    counters = namespace["cache"].counters
    assert (counters.model_hits, counters.tool_hits) == (2, 2)
    assert namespace["state"].last_sequence > 0

    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in consume_all(
        service.bootstrap, service.events_topic, expect=6 * STEPS, timeout=30
    )]  # fmt: skip
    sequences = sorted(e.sequence for e in events if e.run_id == RUN)
    assert sequences == list(range(1, len(sequences) + 1))  # no gap, no number used twice
    # REQUEST, RESPONSE, CALL, RESULT, STEP_END per step, and the new process's run.resumed
    assert len(sequences) == 5 * STEPS + 1
    (resumed,) = [e for e in events if e.run_id == RUN and e.type == "run.resumed"]
    assert resumed.sequence == 5 * 2 + 1  # right after the crashed life's two steps
    assert (resumed.step, resumed.data.at_step, resumed.data.after_sequence) == (3, 3, 10)
    assert (resumed.data.cached_steps, resumed.data.cache_hits) == (2, 4)
    assert resumed.data.pid == os.getpid()  # the resuming process (this one, as written)
