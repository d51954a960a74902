"""A non-idempotent side effect is never repeated by a resumed run, and a run whose content is
published by reference resumes with the model's real answers — with real processes: an agent
(a python child running docs/RESUME.md's block as written, through the real publisher, to the
real broker), a real ``runtrail run resume-cache``, a SIGKILL right after the side effect, and
the same agent started again under the same run ID.

The agent's model stands for a real LLM: its arguments vary from one process to the next (as a
sampled answer can), so a resumed step that asked the model again would call the tool with
other arguments, miss the open intent, and take the side effect a second time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtrail.events import validate_json_form
from runtrail.resume import (
    OutcomeUnknown,
    ResumableToolExecutor,
    ResumeCache,
    ToolInvocation,
)
from runtrail.resume.builder import EntryBuilder, WriteBatch
from tests import readme_blocks as blocks
from tests.resume_support import TOKENS, CacheService, make_topics
from tests.support import form

MARKER = "<!-- tested as written by tests/test_readme_resume.py -->"
RUN = "run-side-effects-1"
SENTINEL = "SENTINEL-side-effect-5c2"

#: The user's model and tools, then RESUME.md's block as written, then the agent's loop.
PRELUDE = """
import os, signal, sys, time
from pathlib import Path
from runtrail.resume import ModelResult, OutcomeUnknown, ToolInvocation

LEDGER = Path(os.environ["LEDGER"])
MODEL_LOG = Path(os.environ["MODEL_LOG"])
LIFE = os.environ["LIFE"]


class MyModel:  # a sampled LLM: the same prompt, other arguments in another process
    def create(self, prompt):
        step = len(prompt["messages"]) // 2 + 1
        with MODEL_LOG.open("a") as log:
            log.write(f"{LIFE} {step}\\n")
        line = f"effect-{step} {SENTINEL} sample-{os.getpid()}"
        call = {"id": f"call-{step}", "name": "deploy", "arguments": {"line": line}}
        return ModelResult(message=f"step {step}: deploying {SENTINEL}", raw={"toolCall": call})


class MyTools:  # deploy is not idempotent: each execution appends to the ledger
    def execute(self, call):
        with LEDGER.open("a") as ledger:
            ledger.write(call.arguments["line"] + "\\n")
        if call.step == int(os.environ.get("CRASH_IN_STEP", "0")):
            publisher.sync()  # the TOOL_CALL is on the broker; its TOOL_RESULT never will be
            os.kill(os.getpid(), signal.SIGKILL)
        return {"deployed": call.arguments["line"]}


my_model, my_tools = MyModel(), MyTools()
""".replace("{SENTINEL}", SENTINEL)

LOOP = """
crash_after = int(os.environ.get("CRASH_AFTER_STEP", "0"))
messages = []
try:
    for step in range(1, 4):
        recorder.begin_step(step, turn_id="turn-1")
        if os.environ.get("OTHER_CALL_IN_STEP") == str(step):  # the agent decides otherwise
            tools.execute(ToolInvocation("deploy", {"line": "other"}, "call-x", step, "turn-1"))
        result = model.create({"model": "m", "temperature": 1, "messages": list(messages)})
        print(f"step {step} model message: {result.message!r}", flush=True)
        call = result.raw["toolCall"]
        output = tools.execute(
            ToolInvocation(call["name"], call["arguments"], call["id"], step, "turn-1")
        )
        print(f"step {step} tool output: {output!r}", flush=True)
        messages += [
            {"role": "assistant", "content": result.message},
            {"role": "tool", "content": output},
        ]
        recorder.step_end("tool_use")
        if step == crash_after:
            publisher.sync()
            os.kill(os.getpid(), signal.SIGKILL)
except OutcomeUnknown as exc:
    print(f"outcome unknown: {exc}", file=sys.stderr, flush=True)
    publisher.close()
    sys.exit(3)
publisher.close()
print("done", flush=True)
"""


@dataclass
class PrivateCacheService(CacheService):
    """The service, with the agent's content store and policy (when content is by reference)."""

    privacy: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.privacy}


@dataclass
class Agent:
    service: CacheService
    home: Path
    privacy: dict[str, str] = field(default_factory=dict)

    @property
    def ledger(self) -> Path:
        return self.home / "ledger.txt"

    @property
    def model_log(self) -> Path:
        return self.home / "model.log"

    def script(self) -> Path:
        path = self.home / "agent.py"
        block = blocks.readme_block(MARKER, what="resume example")
        path.write_text(PRELUDE + block + LOOP)
        return path

    def run(self, life: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
        env.update(
            RUNTRAIL_BOOTSTRAP_SERVERS=self.service.bootstrap,
            RUNTRAIL_EVENTS_TOPIC=self.service.events_topic,
            RUNTRAIL_TENANT="acme",
            RUNTRAIL_SPOOL_DIR=str(self.home / "spool"),
            RUNTRAIL_STATE_DIR=str(self.home / "agent-state"),
            RUN_ID=RUN,
            RESUME_CACHE_URL=self.service.url,
            RESUME_CACHE_TOKEN=TOKENS["acme"],
            LEDGER=str(self.ledger),
            MODEL_LOG=str(self.model_log),
            LIFE=life,
            **self.privacy,
            **extra,
        )
        return subprocess.run(
            [sys.executable, str(self.script())],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            cwd=self.home,
        )

    def effects(self) -> list[str]:
        return [line.split()[0] for line in self.ledger.read_text().splitlines()]

    def model_calls(self, life: str) -> list[int]:
        lines = self.model_log.read_text().splitlines() if self.model_log.exists() else []
        return [int(step) for who, step in (line.split() for line in lines) if who == life]


def _service(
    kafka_bootstrap: str, home: Path, privacy: dict[str, str] | None = None
) -> Iterator[CacheService]:
    events, cache = make_topics(kafka_bootstrap, "sidefx")
    (home / "service").mkdir()
    service = PrivateCacheService(
        kafka_bootstrap, events, cache, home / "service", privacy=privacy or {}
    ).start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def service(kafka_bootstrap: str, tmp_path: Path) -> Iterator[CacheService]:
    yield from _service(kafka_bootstrap, tmp_path)


@pytest.mark.kafka
def test_a_resumed_run_never_repeats_a_side_effect_whatever_the_model_answers(
    service: CacheService, tmp_path: Path
) -> None:
    agent = Agent(service, tmp_path)
    first = agent.run("first", CRASH_IN_STEP="2")
    assert first.returncode == -9, first.stderr[-3000:]  # SIGKILLed right after its effect
    assert agent.effects() == ["effect-1", "effect-2"]

    second = agent.run("second")
    assert second.returncode == 3, (second.stdout[-2000:], second.stderr[-3000:])
    assert "outcome unknown" in second.stderr
    assert f"'{RUN}'" in second.stderr and "step 2" in second.stderr
    assert "'call-2'" in second.stderr
    assert agent.effects() == ["effect-1", "effect-2"]  # not taken again
    # step 2 never ended: its model is asked again, and the other arguments it answers are
    # held by the call the first life left open
    assert agent.model_calls("second") == [2]

    # another call in the step whose outcome is unknown (other arguments, another call ID):
    # still held, whatever the agent decided
    third = agent.run("third", OTHER_CALL_IN_STEP="2")
    assert third.returncode == 3, (third.stdout[-2000:], third.stderr[-3000:])
    assert "outcome unknown" in third.stderr and "'call-2'" in third.stderr
    assert agent.effects() == ["effect-1", "effect-2"]


@pytest.mark.kafka
def test_a_run_published_by_reference_resumes_with_the_models_real_answers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    privacy = {
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
        "RUNTRAIL_PRIVACY_POLICY": '{"byReference": "all", "subject": "run"}',
    }
    for service in _service(kafka_bootstrap, tmp_path, privacy):
        agent = Agent(service, tmp_path, privacy)
        first = agent.run("first", CRASH_AFTER_STEP="2")
        assert first.returncode == -9, first.stderr[-3000:]

        second = agent.run("second")
        assert second.returncode == 0, (second.stdout[-2000:], second.stderr[-3000:])
        assert agent.effects() == ["effect-1", "effect-2", "effect-3"]  # each once
        assert agent.model_calls("second") == [3]  # steps 1 and 2: hits
        for step in (1, 2):  # the answers the agent is given are the model's, opened
            assert f"step {step} model message: 'step {step}: deploying {SENTINEL}'" in (
                second.stdout
            )
            assert f"step {step} tool output: {{'deployed': 'effect-{step} {SENTINEL}" in (
                second.stdout
            )
        assert "rtref:" not in second.stdout


# --- the rules underneath, without processes ------------------------------------------------

PROMPT = {"model": "m", "messages": [{"role": "user", "content": "deploy"}]}
CALL: dict[str, Any] = {"callId": "call-2", "toolName": "deploy", "arguments": {"line": "effect-2"}}


def _entries(*specs: tuple[str, dict[str, Any]]) -> WriteBatch:
    builder, out = EntryBuilder(), WriteBatch()
    for i, (kind, data) in enumerate(specs):
        builder.feed(validate_json_form(form(kind, "run-1", i + 1, data, step=2)), 0, out)
    return out


def test_an_earlier_lifes_open_intent_holds_every_call_of_its_step() -> None:
    class Ledger:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def execute(self, call: ToolInvocation) -> object:
            self.lines.append(call.arguments["line"])
            return "ok"

    cache = ResumeCache("run-1", tenant="acme")
    # this process's own call in flight does not hold a parallel call of its step
    cache.open_intent("deploy", {"line": "a"}, call_id="call-a", step=2, turn_id="t")
    ledger = Ledger()
    tools = ResumableToolExecutor(ledger, cache, idempotent={"search"})
    assert tools.execute(ToolInvocation("deploy", {"line": "b"}, "call-b", 2, "t")) == "ok"

    resumed = ResumeCache("run-1", tenant="acme")
    left = ResumeCache("run-1", tenant="acme")
    left.open_intent("deploy", {"line": "effect-2"}, call_id="call-2", step=2, turn_id="t")
    left.open_intent("search", {"q": "x"}, call_id="call-s", step=3, turn_id="t")
    resumed.load_entries([], left.open_intents())  # what the crashed life left
    tools = ResumableToolExecutor(ledger, resumed, idempotent={"search"})
    with pytest.raises(OutcomeUnknown) as held:  # other arguments, another call ID: held
        tools.execute(ToolInvocation("deploy", {"line": "effect-2 v2"}, "call-9", 2, "t"))
    assert "'call-2'" in str(held.value) and "step 2" in str(held.value)
    assert ledger.lines == ["b"]
    # another step runs; an idempotent tool's open intent holds no other call of its step
    assert tools.execute(ToolInvocation("deploy", {"line": "c"}, "call-c", 1, "t")) == "ok"
    assert tools.execute(ToolInvocation("deploy", {"line": "d"}, "call-d", 3, "t")) == "ok"
    assert ledger.lines == ["b", "c", "d"]
