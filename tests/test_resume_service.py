"""The resume-cache service over a real broker: entries from the stream, per-tenant HTTP lookups,
the compacted topic, read-your-writes, and the ``runtrail cache`` CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.publisher import Publisher
from runtrail.resume import (
    Kind,
    ModelResult,
    ResumableModelClient,
    ResumableToolExecutor,
    ResumeCache,
    RunRecorder,
    Scope,
    ToolInvocation,
    model_key,
    tool_key,
)
from runtrail.resume.http_client import ServiceCacheClient
from runtrail.resume.remote import Lookup
from runtrail.resume.topic_client import TopicCacheClient
from tests.resume_fakes import LedgerTools, ScriptedModel
from tests.resume_support import TOKENS, CacheService, get, make_topics

pytestmark = [pytest.mark.kafka]


@pytest.fixture
def service(kafka_bootstrap: str, tmp_path: Path) -> Iterator[CacheService]:
    events, cache = make_topics(kafka_bootstrap)
    svc = CacheService(kafka_bootstrap, events, cache, tmp_path).start()
    try:
        yield svc
    finally:
        svc.stop()


def run_agent(
    cache: ResumeCache,
    recorder: RunRecorder | None,
    model: ScriptedModel,
    tools: LedgerTools,
    steps: int,
) -> None:
    client = ResumableModelClient(model, cache, recorder=recorder)
    executor = ResumableToolExecutor(tools, cache, recorder=recorder)
    messages: list[dict[str, Any]] = []
    for step in range(1, steps + 1):
        if recorder is not None:
            recorder.begin_step(step, turn_id="t1")
        result = client.create({"model": "fake-1", "temperature": 0, "messages": list(messages)})
        call = result.raw["toolCall"]
        output = executor.execute(
            ToolInvocation(call["name"], call["arguments"], call["id"], step, "t1")
        )
        messages += [
            {"role": "assistant", "content": result.message},
            {"role": "tool", "content": output},
        ]
        if recorder is not None:
            recorder.step_end("tool_use")


def test_entries_are_served_per_tenant_and_written_to_the_compacted_topic(
    service: CacheService, tmp_path: Path
) -> None:
    tools = LedgerTools(tmp_path / "ledger.txt")
    publishers = {t: Publisher(service.settings(t)) for t in TOKENS}
    for tenant, publisher in publishers.items():
        recorder = RunRecorder(publisher, "run-1")
        run_agent(
            ResumeCache("run-1", tenant=tenant, fresh_run=True), recorder, ScriptedModel(), tools, 3
        )

    acme = publishers["acme"]
    client = ServiceCacheClient(service.url, TOKENS["acme"], wait_ms=20_000)
    resumed = ResumeCache(
        "run-1", tenant="acme", remote=client, read_your_writes=acme.acked_offsets
    )
    model = ScriptedModel()
    run_agent(resumed, None, model, tools, 3)
    assert model.calls == [] and (resumed.model_hits, resumed.tool_hits) == (3, 3)
    assert len(tools.executed) == 6  # 3 per tenant, none repeated

    # per tenant: a token only ever sees its own tenant; another tenant's key is a plain 404
    key = model_key({"model": "fake-1", "temperature": 0, "messages": []})
    path = f"/v1/tenants/{{}}/entries/model/{key}?run=run-1"
    status, body = get(service.url + path.format("acme"), TOKENS["acme"])
    assert status == 200 and body["entry"]["tenantId"] == "acme"
    cross = get(service.url + path.format("globex"), TOKENS["acme"])
    genuine_miss = get(
        service.url + path.format("acme").replace("run-1", "run-none"), TOKENS["acme"]
    )
    assert cross == genuine_miss == (404, {"entry": None, "intent": None})
    assert get(service.url + path.format("acme"), None)[0] == 401
    assert get(service.url + path.format("acme"), "tok-wrong")[0] == 401
    other = ResumeCache("run-1", tenant="globex", remote=client)  # acme's token, globex's cache
    assert other.lookup_model({"model": "fake-1", "temperature": 0, "messages": []}) is None
    assert other.lookup_failures == 0  # a trustworthy miss, not an error

    tenant_wide = ResumeCache("run-2", tenant="acme", scope=Scope.TENANT, remote=client)
    assert tenant_wide.lookup_model({"model": "fake-1", "temperature": 0, "messages": []})
    assert (
        ResumeCache("run-2", tenant="acme", remote=client).lookup_model(
            {"model": "fake-1", "temperature": 0, "messages": []}
        )
        is None
    )

    # the compacted topic alone is a complete cache (bootstrapped with no service)
    topic_client = TopicCacheClient(service.settings("acme"), "acme", wait_ms=20_000)
    try:
        answer: Lookup = topic_client.lookup(
            tenant="acme",
            run_id="run-1",
            kind=Kind.TOOL,
            key=tool_key("append", {"line": "effect-2"}),
            scope=Scope.RUN,
            min_offsets=acme.acked_offsets(),
        )
        assert answer.entry is not None and answer.entry.result == {"ok": True, "line": "effect-2"}
        assert topic_client.entry_count() == 6  # acme's only
        from_topic = ResumeCache("run-1", tenant="acme", remote=topic_client)
        model = ScriptedModel()
        run_agent(from_topic, None, model, tools, 3)
        assert model.calls == [] and from_topic.tool_hits == 3
        assert (
            topic_client.run_state(tenant="acme", run_id="run-1", min_offsets={}).last_sequence
            == 15
        )
    finally:
        topic_client.close()
    for publisher in publishers.values():
        publisher.close()

    # the CLI reads the same store
    cli = [sys.executable, "-m", "runtrail_tools.cli.main", "cache"]
    store = ["--store-url", service.store_url]
    out = subprocess.run([*cli, "stats", *store], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["tenants"]["acme"] == {"model": 3, "tool": 3, "runs": 1}
    args = json.dumps({"line": "effect-1"})
    got = subprocess.run(
        [
            *cli,
            "get",
            "--tenant",
            "acme",
            "--tool",
            "append",
            "--args",
            args,
            "--run",
            "run-1",
            *store,
        ],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0 and json.loads(got.stdout)["result"]["line"] == "effect-1"
    prompt_file = tmp_path / "prompt.json"
    prompt_file.write_text(json.dumps({"model": "fake-1", "temperature": 1, "messages": []}))
    miss = subprocess.run(
        [*cli, "get", "--tenant", "acme", "--model-prompt", str(prompt_file), *store],
        capture_output=True,
        text=True,
    )
    assert miss.returncode == 1
    via_api = subprocess.run(
        [
            *cli,
            "get",
            "--tenant",
            "acme",
            "--tool",
            "append",
            "--args",
            args,
            "--run",
            "run-1",
            "--service",
            service.url,
            "--token",
            TOKENS["acme"],
        ],
        capture_output=True,
        text=True,
    )
    assert via_api.returncode == 0, via_api.stderr
    exported = tmp_path / "export.json"
    subprocess.run([*cli, "export", str(exported), "--tenant", "acme", *store], check=True)
    loaded = ResumeCache.load_json(exported, "run-1", tenant="acme")
    assert len(loaded) == 6
    fresh_store = f"sqlite://{tmp_path / 'imported.db'}"
    subprocess.run(
        [*cli, "import", str(exported), "--no-topic", "--store-url", fresh_store], check=True
    )
    out = subprocess.run(
        [*cli, "stats", "--store-url", fresh_store], capture_output=True, text=True
    )
    assert json.loads(out.stdout)["tenants"]["acme"] == {"model": 3, "tool": 3}


def test_read_your_writes_lookups_wait_while_the_service_is_paused(
    service: CacheService, tmp_path: Path
) -> None:
    publisher = Publisher(service.settings("acme"))
    recorder = RunRecorder(publisher, "run-ryw")
    client = ServiceCacheClient(service.url, TOKENS["acme"], wait_ms=20_000)
    assert service.proc is not None
    service.proc.proc.send_signal(signal.SIGSTOP)  # the service consumes nothing now
    try:
        prompt = {"model": "m", "temperature": 0, "messages": []}
        recorder.begin_step(1)
        recorder.model_request(prompt)
        recorder.model_response("answer", {"id": "r1"})
        recorder.step_end("done")  # published and acknowledged
        cache = ResumeCache(
            "run-ryw", tenant="acme", remote=client, read_your_writes=publisher.acked_offsets
        )
        found: list[ModelResult | None] = []
        started = time.monotonic()
        lookup = threading.Thread(target=lambda: found.append(cache.lookup_model(prompt)))
        lookup.start()
        lookup.join(1.5)
        assert lookup.is_alive()  # waiting, not answering "miss"
    finally:
        service.proc.proc.send_signal(signal.SIGCONT)
    lookup.join(30)
    assert found == [ModelResult("answer", {"id": "r1"})]
    assert time.monotonic() - started >= 1.5
    assert cache.model_hits == 1 and cache.lookup_failures == 0
    publisher.close()


def test_a_killed_service_restarts_from_its_store_with_open_nodes_and_intents(
    service: CacheService,
) -> None:
    publisher = Publisher(service.settings("acme"))
    recorder = RunRecorder(publisher, "run-restart", session_id="s1")
    client = ServiceCacheClient(service.url, TOKENS["acme"], wait_ms=20_000)
    prompt = {"model": "m", "temperature": 0, "messages": []}
    recorder.begin_step(1, turn_id="t1")
    recorder.model_request(prompt)
    recorder.model_response("thinking about it", None)
    recorder.tool_call("c1", "charge", {"amount": 5})  # the intent: acknowledged
    state = client.run_state(
        tenant="acme", run_id="run-restart", min_offsets=publisher.acked_offsets()
    )
    assert [i.call_id for i in state.open_intents] == ["c1"]
    time.sleep(0.5)  # past a commit interval: the open model node and the intent are in the store
    assert service.proc is not None
    service.proc.kill()

    recorder.tool_result("c1", "charge", output={"charged": 5})
    recorder.step_end("done")
    service.start()  # same store, same group
    cache = ResumeCache(
        "run-restart", tenant="acme", remote=client, read_your_writes=publisher.acked_offsets
    )
    # the model node was open when the service died: restored from the store, closed at STEP_END
    assert cache.lookup_model(prompt) == ModelResult("thinking about it", None)
    assert cache.lookup_tool("charge", {"amount": 5}).entry is not None
    state = client.run_state(
        tenant="acme", run_id="run-restart", min_offsets=publisher.acked_offsets()
    )
    assert state.open_intents == () and state.last_sequence == 5
    publisher.close()
