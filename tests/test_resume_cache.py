"""The in-process resume cache and decorators (seed 000 §3, §6): keys, scoping, counters,
persistence, the streaming trap, failures, intents, and degrading when the remote is gone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtrail.resume import (
    CacheFileError,
    Intent,
    OutcomeUnknown,
    ResumableModelClient,
    ResumableToolExecutor,
    ResumeCache,
    Scope,
    ToolFailed,
    ToolInvocation,
    ToolOutcome,
    idempotency_key,
    model_key,
    tool_key,
)
from runtrail.resume.http_client import ServiceCacheClient
from runtrail.resume.partitioning import murmur2, partition_for
from runtrail_tools.kafka.ports import free_ports
from tests.resume_fakes import LedgerTools, ScriptedModel


def agent(
    cache: ResumeCache,
    model: ScriptedModel,
    tools: LedgerTools,
    steps: int = 4,
    **executor_options: Any,
) -> list[Any]:
    """A tiny agent loop over the decorators: one model call and one tool call per step."""
    client = ResumableModelClient(model, cache)
    executor = ResumableToolExecutor(tools, cache, **executor_options)
    messages: list[dict[str, Any]] = []
    outputs = []
    for step in range(1, steps + 1):
        result = client.create({"model": "fake-1", "temperature": 0, "messages": list(messages)})
        call = result.raw["toolCall"]
        output = executor.execute(ToolInvocation(call["name"], call["arguments"], call["id"], step))
        outputs.append(output)
        messages += [
            {"role": "assistant", "content": result.message},
            {"role": "tool", "content": output},
        ]
    return outputs


@pytest.fixture
def tools(tmp_path: Path) -> LedgerTools:
    return LedgerTools(tmp_path / "ledger.txt")


def test_first_run_misses_and_records_second_run_hits_everything(tools: LedgerTools) -> None:
    cache = ResumeCache("run-1", tenant="acme")
    first = ScriptedModel()
    outputs = agent(cache, first, tools)
    assert (cache.model_hits, cache.model_misses, cache.tool_hits, cache.tool_misses) == (
        0,
        4,
        0,
        4,
    )
    assert first.calls == [1, 2, 3, 4]
    assert tools.lines() == ["effect-1", "effect-2", "effect-3", "effect-4"]

    second = ScriptedModel()
    again = agent(cache, second, tools)
    assert again == outputs
    assert (cache.model_hits, cache.model_misses, cache.tool_hits, cache.tool_misses) == (
        4,
        4,
        4,
        4,
    )
    assert second.calls == []  # no delegate call at all
    assert len(tools.executed) == 4  # no tool executed again: no side effect repeated
    assert tools.lines() == ["effect-1", "effect-2", "effect-3", "effect-4"]


def test_changing_one_prompt_field_misses() -> None:
    cache = ResumeCache("run-1")
    model = ScriptedModel()
    client = ResumableModelClient(model, cache)
    prompt = {
        "model": "m",
        "temperature": 0.2,
        "messages": [],
        "tools": [{"name": "a"}, {"name": "b"}],
    }
    client.create(prompt)
    client.create(dict(reversed(prompt.items())))  # same content, other key order: a hit
    assert (cache.model_hits, cache.model_misses) == (1, 1)
    client.create({**prompt, "temperature": 0.3})
    client.create({**prompt, "tools": [{"name": "b"}, {"name": "a"}]})
    assert (cache.model_hits, cache.model_misses) == (1, 3)
    assert len(model.calls) == 3


def test_keys_are_canonical_sha256() -> None:
    assert model_key({"b": 1, "a": [1, 2]}) == model_key({"a": [1, 2], "b": 1})
    assert model_key({"a": [1, 2]}) != model_key({"a": [2, 1]})
    assert len(model_key({})) == 64
    assert tool_key("search", {"q": "x", "n": 1}) == tool_key("search", {"n": 1, "q": "x"})
    assert tool_key("search", {"q": "x"}) != tool_key("lookup", {"q": "x"})
    assert idempotency_key("r", "c1") == idempotency_key("r", "c1") != idempotency_key("r", "c2")


def test_scope_run_by_default_tenant_wide_when_configured(tools: LedgerTools) -> None:
    recorded = ResumeCache("run-1", tenant="acme")
    agent(recorded, ScriptedModel(), tools, steps=2)
    entries = recorded.entries()

    other_run = ResumeCache("run-2", tenant="acme")
    other_run.load_entries(entries)
    model = ScriptedModel()
    agent(other_run, model, tools, steps=2)
    assert model.calls == [1, 2]  # run-1's answers are not served to run-2

    tenant_wide = ResumeCache("run-3", tenant="acme", scope=Scope.TENANT)
    tenant_wide.load_entries(entries)
    model = ScriptedModel()
    agent(tenant_wide, model, tools, steps=2)
    assert model.calls == [] and tenant_wide.model_hits == 2  # same input, any run: a hit

    other_tenant = ResumeCache("run-1", tenant="globex", scope=Scope.TENANT)
    other_tenant.load_entries(entries)
    model = ScriptedModel()
    agent(other_tenant, model, tools, steps=2)
    assert model.calls == [1, 2]  # never across tenants


def test_remove_last_model_entry_resumes_from_the_last_step(tools: LedgerTools) -> None:
    cache = ResumeCache("run-1")
    agent(cache, ScriptedModel(), tools)
    assert cache.remove_last_model_entry()
    model = ScriptedModel()
    agent(cache, model, tools)
    assert model.calls == [4]  # only the "crashed" last step calls the model again
    assert cache.tool_hits == 4  # and its tool call is still a hit: no side effect repeated
    assert tools.lines() == ["effect-1", "effect-2", "effect-3", "effect-4"]


def test_failed_tool_calls_and_errored_model_calls_are_not_cached(tmp_path: Path) -> None:
    cache = ResumeCache("run-1")
    model = ScriptedModel()
    model.fail_next = True
    client = ResumableModelClient(model, cache)
    with pytest.raises(TimeoutError):
        client.create({"model": "m", "temperature": 0, "messages": []})
    assert len(cache) == 0
    client.create({"model": "m", "temperature": 0, "messages": []})
    assert model.calls == [1]

    tools = LedgerTools(tmp_path / "ledger.txt", fail_steps=frozenset({1}))
    executor = ResumableToolExecutor(tools, cache)
    call = ToolInvocation("append", {"line": "x"}, "c1", step=1)
    with pytest.raises(ConnectionError):
        executor.execute(call)
    assert cache.lookup_tool("append", {"line": "x"}).entry is None
    assert cache.open_intents() == []  # the outcome is known: failed, not "unknown"
    tools.fail_steps = frozenset()
    assert executor.execute(call) == {"ok": True, "line": "x"}  # retried for real
    assert len(tools.executed) == 2


def test_streaming_hit_returns_the_terminal_result_without_deltas() -> None:
    cache = ResumeCache("run-1")
    client = ResumableModelClient(ScriptedModel(), cache)
    prompt = {"model": "m", "temperature": 0, "messages": []}
    deltas: list[str] = []
    fresh = client.create_stream(prompt, deltas.append)
    assert "".join(deltas) == "step 1: calling append" and len(deltas) > 1
    replayed: list[str] = []
    hit = client.create_stream(prompt, replayed.append)
    assert replayed == []  # the streaming trap: no delta is re-emitted on a hit
    assert hit.message == "step 1: calling append" and hit.raw == fresh.raw
    assert cache.model_hits == 1


def test_save_and_load_json_atomically(tmp_path: Path, tools: LedgerTools) -> None:
    path = tmp_path / "state" / "resume.json"
    empty = ResumeCache.load_json(path, "run-1")  # missing file: empty cache, no error
    assert len(empty) == 0
    cache = ResumeCache("run-1", tenant="acme")
    agent(cache, ScriptedModel(), tools, steps=3)
    assert cache.save_json(path) == 6
    assert [p.name for p in path.parent.iterdir()] == ["resume.json"]  # no temp file left
    loaded = ResumeCache.load_json(path, "run-1", tenant="acme")
    model = ScriptedModel()
    agent(loaded, model, tools, steps=3)
    assert model.calls == [] and loaded.tool_hits == 3
    path.write_text("{not json")
    with pytest.raises(CacheFileError):
        ResumeCache.load_json(path, "run-1")


def test_cross_process_save_then_load_in_a_new_process_hits_everything(tmp_path: Path) -> None:
    files = {
        "--ledger": tmp_path / "ledger.txt",
        "--model-log": tmp_path / "model.log",
        "--cache-file": tmp_path / "cache.json",
    }
    base = [sys.executable, "-m", "tests.resume_agent", "--run-id", "run-x", "--steps", "3"]
    for flag, value in files.items():
        base += [flag, str(value)]
    first = subprocess.run([*base, "--tag", "first"], capture_output=True, text=True, check=True)
    second = subprocess.run([*base, "--tag", "second"], capture_output=True, text=True, check=True)
    assert json.loads(first.stdout)["modelMisses"] == 3
    counters = json.loads(second.stdout)
    assert counters["modelHits"] == 3 and counters["toolHits"] == 3
    assert counters["modelMisses"] == 0 and counters["toolMisses"] == 0
    assert files["--model-log"].read_text().split("\n")[:-1] == ["first 1", "first 2", "first 3"]
    assert files["--ledger"].read_text().split() == ["effect-1", "effect-2", "effect-3"]


class _Crash(BaseException):
    """Stands for the process dying inside the tool (nothing after it runs)."""


def _crash_in_tool(tmp_path: Path, tool: str) -> tuple[Path, LedgerTools]:
    """Run one tool call that dies after its side effect; save the cache as a crash leaves it."""
    path = tmp_path / "cache.json"
    tools = LedgerTools(tmp_path / "ledger.txt")
    cache = ResumeCache("run-1", tenant="acme")

    class Dying:
        def execute(self, call: ToolInvocation) -> Any:
            tools.execute(call)
            cache.save_json(path)  # what a persisted record holds at this instant
            raise _Crash

    with pytest.raises(_Crash):
        ResumableToolExecutor(Dying(), cache, idempotent={"put"}).execute(
            ToolInvocation(tool, {"line": "effect-1"}, "call-1", step=1)
        )
    return path, tools


def test_an_intent_without_outcome_stops_a_non_idempotent_tool(tmp_path: Path) -> None:
    path, tools = _crash_in_tool(tmp_path, "append")
    cache = ResumeCache.load_json(path, "run-1", tenant="acme")
    executor = ResumableToolExecutor(tools, cache)
    with pytest.raises(OutcomeUnknown) as caught:
        executor.execute(ToolInvocation("append", {"line": "effect-1"}, "call-1", step=1))
    message = str(caught.value)
    assert "outcome unknown" in message and "'run-1'" in message
    assert "step 1" in message and "'call-1'" in message
    assert tools.lines() == ["effect-1"]

    seen: list[Intent] = []

    def reconcile(intent: Intent) -> ToolOutcome:
        seen.append(intent)
        return ToolOutcome(output={"ok": True, "reconciled": True})

    executor = ResumableToolExecutor(tools, cache, reconcile=reconcile)
    call = ToolInvocation("append", {"line": "effect-1"}, "call-1", step=1)
    assert executor.execute(call) == {"ok": True, "reconciled": True}
    assert seen[0].call_id == "call-1" and seen[0].step == 1
    assert executor.execute(call) == {"ok": True, "reconciled": True}  # now a plain hit
    assert tools.lines() == ["effect-1"] and len(tools.executed) == 1


def test_a_reconciled_failure_raises_and_is_not_cached(tmp_path: Path) -> None:
    path, tools = _crash_in_tool(tmp_path, "append")
    cache = ResumeCache.load_json(path, "run-1", tenant="acme")
    executor = ResumableToolExecutor(
        tools, cache, reconcile=lambda intent: ToolOutcome(error="card declined")
    )
    with pytest.raises(ToolFailed, match="card declined"):
        executor.execute(ToolInvocation("append", {"line": "effect-1"}, "call-1", step=1))
    assert cache.lookup_tool("append", {"line": "effect-1"}).entry is None
    assert cache.open_intents() == []


def test_an_idempotent_tool_runs_again_with_the_same_idempotency_key(tmp_path: Path) -> None:
    path, tools = _crash_in_tool(tmp_path, "put")
    cache = ResumeCache.load_json(path, "run-1", tenant="acme")
    executor = ResumableToolExecutor(tools, cache, idempotent={"put"})
    output = executor.execute(ToolInvocation("put", {"line": "effect-1"}, "call-1", step=1))
    assert output["deduplicated"] is True
    keys = [key for _, _, key in tools.executed]
    assert keys == [idempotency_key("run-1", "call-1")] * 2
    assert len(tools.lines()) == 1 and executor.reexecuted == 1


def test_an_unreachable_service_degrades_except_where_a_side_effect_could_repeat(
    tools: LedgerTools,
) -> None:
    (port,) = free_ports(1)
    remote = ServiceCacheClient(f"http://127.0.0.1:{port}", "token", wait_ms=0, timeout_s=0.5)
    cache = ResumeCache("run-1", tenant="acme", remote=remote)
    model = ScriptedModel()
    result = ResumableModelClient(model, cache).create({"model": "m", "messages": []})
    assert result.message and model.calls == [1]  # degraded to a real call
    assert cache.lookup_failures == 1

    executor = ResumableToolExecutor(tools, cache, idempotent={"put"})
    with pytest.raises(OutcomeUnknown, match="cannot be reached"):
        executor.execute(ToolInvocation("append", {"line": "effect-1"}, "call-1", step=1))
    assert tools.executed == []  # might have run before the crash: not repeated blindly
    assert executor.execute(ToolInvocation("put", {"line": "effect-2"}, "call-2", step=2))["ok"]
    assert cache.lookup_failures == 3

    fresh = ResumeCache("run-new", tenant="acme", remote=remote, fresh_run=True)
    ResumableToolExecutor(tools, fresh).execute(ToolInvocation("append", {"line": "e"}, "c", 1))
    assert fresh.lookup_failures == 0  # a fresh run has nothing to ask about
    assert tools.lines() == ["effect-2 key=" + idempotency_key("run-1", "call-2"), "e"]


def test_murmur2_partitioner_matches_kafka() -> None:
    assert murmur2(b"21") == -973932308
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"abc") == 479470107
    assert partition_for("abc", 6) == 479470107 % 6
