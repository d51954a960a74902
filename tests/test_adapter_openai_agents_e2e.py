"""OpenAI Agents SDK runs end to end: the real broker and every service, each its own process.

Two runs go through ``Runner.run`` with the runtrail processor installed (one line), beside a
processor of the test's own that keeps what the SDK traced. One run calls a function tool and
answers; the other's model call fails. Once every consumer group has committed to the end of
the topic, each service's store is read:

* capture: one MODEL record per model call and one TOOL record per tool call, whose input,
  output and token counts equal what the SDK traced;
* resume-cache: an entry per answered model call and per tool call;
* sessions: the group's session holds every event of the run;
* audit: every event is sealed in a chain that verifies;
* projector: ``succeeded`` and ``failed``, the runtime counts right, not halted.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.publisher import Publisher
from runtrail.runtime.registry import SERVICES
from runtrail_tools.devstack.catchup import wait_caught_up
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import DevStack, StackOptions
from runtrail_tools.devstack.state import StackState
from tests.support import stack_settings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[DevStack, StackState, Settings]]:
    prefix = f"oaa-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        tmp_path / "state",
        prefix,
        spool_dir=tmp_path / "spool",
        partitions=2,
    )
    options = StackOptions(
        port_base=find_free_base(SERVICES), manage_broker=False, group_prefix=prefix
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        yield dev, dev.up(), settings
    finally:
        assert dev.down() == []


def test_sdk_runs_reach_every_service_as_the_sdk_saw_them(
    stack: tuple[DevStack, StackState, Settings],
) -> None:
    from agents import Agent, RunConfig, Runner
    from agents.tracing import set_trace_processors

    from runtrail.adapters import openai_agents
    from tests.openai_agents_support import ScriptedModel, Seen, add, call, say

    _, state, settings = stack
    set_trace_processors([])
    seen = Seen()
    publisher = Publisher(settings)
    try:
        processor = openai_agents.install(publisher)  # the one line a user adds
        set_trace_processors([seen, processor])
        model = ScriptedModel([[call("add", {"a": 2, "b": 3}, "call-1")], [say("it is 5")]])
        ok = Agent(name="calc", instructions="add", model=model, tools=[add])
        session = f"conv-{uuid.uuid4().hex[:6]}"
        result = asyncio.run(Runner.run(ok, "add 2 and 3", run_config=RunConfig(group_id=session)))
        assert result.final_output == "it is 5"
        broken = Agent(name="broken", model=ScriptedModel([RuntimeError("upstream 503")]))
        with pytest.raises(RuntimeError):
            asyncio.run(Runner.run(broken, "go"))
        processor.shutdown()
        assert publisher.flush(30.0) == 0
        assert processor.dropped == 0
    finally:
        set_trace_processors([])
        publisher.close()
    ok_id, failed_id = dict.fromkeys(s.trace_id for s in seen.spans)
    groups = {name: r.group for name, r in state.services.items() if r.group}
    assert set(groups) >= {"capture", "resume-cache", "sessions", "audit", "projector"}
    lag = wait_caught_up(settings, groups, settings.events_topic, timeout=180)
    assert set(lag.values()) == {0}, lag

    from runtrail.audit.store import verify_stored
    from runtrail.capture.reader import iter_records
    from runtrail.persistence import (
        AUDIT_LINKS,
        PROJECTIONS,
        RESUME_ENTRIES,
        SESSION_SNAPSHOTS,
        open_store,
    )

    state_dir = Path(state.state_dir)
    tenant = settings.tenant
    audit = open_store(AUDIT_LINKS, f"sqlite:///{state_dir / 'audit.db'}")
    projections = open_store(PROJECTIONS, f"sqlite:///{state_dir / 'projection.db'}")
    cache = open_store(RESUME_ENTRIES, f"sqlite:///{state_dir / 'resume-cache.db'}", readers=1)
    sessions = open_store(SESSION_SNAPSHOTS, (state_dir / "sessions").as_uri())
    try:
        # capture: the records equal what the SDK traced
        records = list(iter_records((state_dir / "capture").as_uri(), ok_id, None, tenant))
        models = sorted((r for r in records if r.node_type == "MODEL"), key=lambda r: r.step or 0)
        tools = [r for r in records if r.node_type == "TOOL"]
        generations, functions = seen.of(ok_id, "generation"), seen.of(ok_id, "function")
        assert len(models) == len(generations) == 2 and len(tools) == len(functions) == 1
        for record, span in zip(models, generations, strict=True):
            assert record.inputs["input"] == span.input
            assert record.inputs["model"] == record.model_id == span.model
            assert record.outputs == {"output": span.output, "usage": span.usage}
            assert (record.input_tokens, record.output_tokens) == (12, 5)
            assert not record.incomplete and record.retry_count == 0
        assert models[1].output_text == "it is 5"
        (tool,), (fn,) = tools, functions
        # capture keeps the whole v2 TOOL_CALL: the adapter sets no ai4j call `type`
        assert tool.inputs == {"callId": "call-1", "toolName": fn.name,
                               "arguments": json.loads(fn.input), "type": None}  # fmt: skip
        assert tool.outputs["output"] == fn.output and tool.outputs["error"] is None
        assert {r.session_id for r in records} == {session}

        # resume-cache: both answered model calls and the tool call
        entries = [e for e in cache.entries(tenant) if e.run_id == ok_id]
        assert sorted(e.kind.value for e in entries) == ["model", "model", "tool"]
        assert [e for e in cache.entries(tenant) if e.run_id == failed_id and
                e.kind.value == "model"] == []  # fmt: skip  # an errored call is never cached

        for run_id, status, session_id in ((ok_id, "succeeded", session),
                                           (failed_id, "failed", failed_id)):  # fmt: skip
            # projector
            row = projections.get(tenant, run_id)
            assert row is not None and not row.halted, row
            assert row.status == status
            # audit: every event sealed, the chain valid
            verdict = verify_stored(audit, tenant, run_id)
            assert verdict.valid and verdict.length == row.version
            # sessions: the session holds the whole run
            snapshot = sessions.load(tenant, session_id)
            assert snapshot is not None and len(snapshot.event_log) == row.version
        ok_row = projections.get(tenant, ok_id)
        assert ok_row is not None and ok_row.state is not None
        assert (ok_row.state.model_nodes, ok_row.state.tool_nodes) == (2, 1)
        assert ok_row.version == 11
    finally:
        for store in (audit, projections, cache, sessions):
            store.close()
