"""runtrail accepts every runtime payload ai4j's own runtime emits (issue 12, item "rejects").

The events come from ai4j's real ReAct runtime (``Harness emit``: a scripted model with a
retry, streamed reasoning and text, two tool calls of which one fails, and a final answer),
mapped by :mod:`runtrail.events.ai4j`. Before MODEL_RETRY/TOOL_CALL/TOOL_RESULT v2, validation
refused ``maxAttempts``, an ``AgentPrompt`` as MODEL_REQUEST data, ``AgentToolCall``'s ``name``
and ``type`` and ``AgentToolResult``'s ``name``/``ok``/``failed``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from runtrail.audit.chain import HashChainedEventLog
from runtrail.config import Settings
from runtrail.events import (
    CURRENT_VERSIONS,
    EventCodec,
    InvalidEvent,
    UnknownEventType,
    validate_json_form,
)
from runtrail.events.ai4j import to_runtrail
from runtrail.events.runtime_events import RUNTIME_TYPES, ModelRequest, ToolResult
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.publisher import Publisher
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.resume.keys import Kind
from tests.ai4j_harness import harness
from tests.support import ServiceProcess, consume_all, create_topic, unique_topic, wait_for

CODEC = EventCodec()
SERVICES = ("capture", "resume-cache", "projector", "sessions", "audit")


@pytest.fixture(scope="module")
def emitted() -> list[dict[str, Any]]:
    """What ai4j's runtime published, every type."""
    return harness().emit()


def runtime_forms(emitted: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The runtime-type events as runtrail partial forms (publish fills the envelope)."""
    out = []
    for event in emitted:
        if event["type"] in RUNTIME_TYPES:
            form = to_runtrail({**event, "runId": run_id})
            form.pop("eventId", None)
            out.append(form)
    return out


def full_form(partial: dict[str, Any], sequence: int) -> dict[str, Any]:
    return {
        "eventId": str(uuid.uuid4()),
        "tenantId": "acme",
        "sequence": str(sequence),
        "schemaVersion": CURRENT_VERSIONS[partial["type"]],
        "occurredAt": "2026-12-01T10:00:00.000Z",
        "actor": {"kind": "agent", "id": "ai4j"},
        "correlationId": partial["runId"],
        **partial,
    }


def test_the_runtime_emits_what_the_findings_say(emitted: list[dict[str, Any]]) -> None:
    by_type: dict[str, dict[str, Any]] = {}
    for event in emitted:
        by_type.setdefault(event["type"], event)  # the first of each type
    assert by_type["MODEL_RETRY"]["payload"] == {
        "attempt": 1,
        "maxAttempts": 3,
        "reason": "429 Too Many Requests",
    }
    assert set(by_type["MODEL_REQUEST"]["payload"]) >= {"model", "items", "tools", "temperature"}
    call = by_type["TOOL_CALL"]["payload"]
    assert isinstance(call["arguments"], str) and call["name"] == "weather"
    failed = [e["payload"] for e in emitted if e["type"] == "TOOL_RESULT"]
    assert [r["failed"] for r in failed] == [False, True]
    # a client that reports tool calls while streaming (ai4j's Anthropic Messages client; the
    # scripted model here) gets each TOOL_CALL published twice: from the stream, then to run it
    calls = [
        (e["payload"]["callId"], e["payload"]["arguments"])
        for e in emitted
        if e["type"] == "TOOL_CALL"
    ]
    assert calls == [("call_1", '{"city":"Paris"}'), ("call_2", "{}")] * 2


def test_every_runtime_payload_validates_and_round_trips(emitted: list[dict[str, Any]]) -> None:
    forms = [full_form(p, i) for i, p in enumerate(runtime_forms(emitted, "run-ai4j"), 1)]
    assert {f["type"] for f in forms} == set(RUNTIME_TYPES)
    for form in forms:
        event = validate_json_form(form)
        decoded = CODEC.decode(CODEC.encode(event))
        assert decoded.written == event.json_form()
    request = next(validate_json_form(f) for f in forms if f["type"] == "MODEL_REQUEST")
    assert isinstance(request.data, ModelRequest)
    prompt = next(e["payload"] for e in emitted if e["type"] == "MODEL_REQUEST")
    assert request.data.prompt == prompt  # the AgentPrompt whole, as ai4j sent it
    results = [validate_json_form(f).data for f in forms if f["type"] == "TOOL_RESULT"]
    assert [r.is_failure for r in results if isinstance(r, ToolResult)] == [False, True]
    assert [r.tool_name for r in results if isinstance(r, ToolResult)] == ["weather", "fail"]


def test_other_ai4j_types_are_refused_by_name(emitted: list[dict[str, Any]]) -> None:
    others = {e["type"] for e in emitted} - set(RUNTIME_TYPES)
    assert others == {"STEP_START", "FINAL_OUTPUT"}
    with pytest.raises(UnknownEventType, match="'STEP_START' is not a runtrail event type"):
        to_runtrail(next(e for e in emitted if e["type"] == "STEP_START"))


def test_v2_refuses_what_contradicts_itself() -> None:
    base = {"type": "TOOL_RESULT", "runId": "r"}
    with pytest.raises(InvalidEvent, match="failed is false"):
        validate_json_form(full_form({**base, "data": {"ok": False, "failed": False}}, 1))
    with pytest.raises(InvalidEvent, match="name"):  # one spelling of the tool name, not both
        validate_json_form(full_form({**base, "data": {"toolName": "a", "name": "b"}}, 1))
    with pytest.raises(InvalidEvent, match="promt"):  # an AgentPrompt has no such field
        validate_json_form(
            full_form(
                {"type": "MODEL_REQUEST", "runId": "r", "data": {"model": "m", "promt": 1}}, 1
            )
        )


@pytest.mark.kafka
@pytest.mark.slow  # five service processes
def test_published_by_cli_and_api_no_service_dead_letters_them(
    emitted: list[dict[str, Any]], kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("ai4j"), partitions=2)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=2)
    cli_run, api_run = "run-ai4j-cli", "run-ai4j-api"
    # `runtrail publish`: one JSON line per event, as an ai4j bridge would write them
    lines = tmp_path / "ai4j.jsonl"
    with lines.open("w") as out:
        for form in runtime_forms(emitted, cli_run):
            out.write(json.dumps({**form, "schemaVersion": CURRENT_VERSIONS[form["type"]]}) + "\n")
    env = {"RUNTRAIL_TENANT": "acme", "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool-cli")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtrail_tools.cli.main",
            "publish",
            str(lines),
            "--topic",
            topic,
            "--bootstrap-servers",
            kafka_bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    # the Python API, for a second tenant
    api_forms = runtime_forms(emitted, api_run)
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        tenant="globex",
        spool_dir=tmp_path / "spool-api",
    )
    with Publisher(settings) as pub:
        for form in api_forms:
            assert (
                pub.publish(
                    form["type"],
                    api_run,
                    form["data"],
                    session_id=form.get("sessionId"),
                    turn_id=form.get("turnId"),
                    step=form.get("step"),
                )
                is not None
            )
        assert pub.flush(30) == 0
    total = 2 * len(api_forms)
    messages = consume_all(kafka_bootstrap, topic, expect=total)
    assert len(messages) == total

    state = tmp_path / "state"
    options = {
        "capture": {"sink_url": (tmp_path / "capture").as_uri(), "idle_flush_s": "86400"},
        "resume-cache": {"http_port": "0"},
        "sessions": {"http_port": "0"},
    }
    procs = [
        ServiceProcess(
            name,
            kafka_bootstrap,
            topic,
            group=f"g-{name}-{topic}",
            options=options.get(name),
            env={"RUNTRAIL_STATE_DIR": str(state)},
            log_path=tmp_path / f"{name}.log",
        )
        for name in SERVICES
    ]
    try:
        for proc_ in procs:
            wait_for(
                lambda p=proc_: p.processed() >= total, 90, what=f"{proc_.service} processed all"
            )
        assert all(p.alive() for p in procs)
    finally:
        for proc_ in procs:
            proc_.terminate()
            proc_.close()
    dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=3)
    assert dead == [], [dict(m.headers() or []) for m in dead]

    # the audit chain hashes the written form: re-sealing what the topic holds gives its links
    store = open_store(AUDIT_LINKS, sqlite_url(state / "audit.db"))
    try:
        for tenant, run in (("acme", cli_run), ("globex", api_run)):
            written = [
                d.written
                for d in (CODEC.decode(m.value()) for m in messages)
                if d.written["runId"] == run
            ]
            written.sort(key=lambda w: int(w["sequence"]))
            log = HashChainedEventLog(tenant, run)
            for form in written:
                log.append(form)
            chain = store.load_chain(tenant, run)
            assert [link.hash for link in chain] == [link.hash for link in log.links]
            assert len(chain) == len(api_forms)
    finally:
        store.close()


#: AgentToolResult fields -> whether ai4j derives ``failed``.
RESULT_CASES: list[tuple[dict[str, Any], bool]] = [
    ({"ok": True, "error": "x"}, True),  # ai4j: a non-blank error fails even with ok=true
    ({"error": "  "}, False),  # a blank error is no failure
    ({"output": "TOOL_ERROR: timeout"}, True),  # ai4j's error prefix
    ({"ok": False}, True),
    ({}, False),
]


@pytest.fixture(scope="module")
def serialized_results() -> list[dict[str, Any]]:
    """Each case's AgentToolResult as ai4j writes it (one JVM run for all)."""
    sequences = {
        str(i): [
            {
                "type": "TOOL_RESULT",
                "runId": "r",
                "step": 0,
                "payload": {"name": "t", "callId": "c", "output": "o", **fields},
            }
        ]
        for i, (fields, _) in enumerate(RESULT_CASES)
    }
    records = harness().capture(sequences)
    return [records[str(i)][0]["outputs"] for i in range(len(RESULT_CASES))]


@pytest.mark.parametrize("case", range(len(RESULT_CASES)))
def test_every_tool_result_ai4j_serializes_is_accepted(
    case: int, serialized_results: list[dict[str, Any]]
) -> None:
    """ai4j derives ``failed``; whatever its AgentToolResult JSON says, runtrail agrees."""
    written = serialized_results[case]
    failed = RESULT_CASES[case][1]
    assert written["failed"] is failed
    event = {"type": "TOOL_RESULT", "runId": "r", "step": 0, "payload": written}
    data = validate_json_form(full_form(to_runtrail(event), 1)).data
    assert isinstance(data, ToolResult)
    assert data.is_failure is failed


def test_the_resume_cache_never_caches_what_ai4j_calls_failed(
    emitted: list[dict[str, Any]],
) -> None:
    """A failed AgentToolResult may carry no ``error`` (an output starting ``TOOL_ERROR``):
    the cache asks ``is_failure``, so only the successful call becomes an entry."""
    partials = runtime_forms(emitted, "run-cache")
    for partial in partials:  # ai4j's sandbox/blocked outputs fail by their prefix alone
        if partial["type"] == "TOOL_RESULT" and partial["data"].get("failed"):
            partial["data"] = {k: v for k, v in partial["data"].items() if k not in ("ok", "error")}
    builder, out = EntryBuilder(), WriteBatch()
    for i, partial in enumerate(partials, 1):
        builder.feed(validate_json_form(full_form(partial, i)), 0, out)
    tools = sorted(e.call_id or "" for e in out.entries.values() if e.kind is Kind.TOOL)
    assert tools == ["call_1"]
    assert sum(1 for e in out.entries.values() if e.kind is Kind.MODEL) == 2


def test_v1_results_keep_their_meaning_after_upcasting() -> None:
    """The v1 -> v2 upcaster adds nulls and decides nothing: a v1 failure is one by its error."""
    for error, failure in ((None, False), ("boom", True)):
        v1 = full_form(
            {
                "type": "TOOL_RESULT",
                "runId": "r",
                "data": {"toolName": "t", "output": 1, "error": error},
            },
            1,
        )
        v1["schemaVersion"] = 1
        data = CODEC.decode(CODEC.encode(validate_json_form(v1))).event.data
        assert isinstance(data, ToolResult)
        assert (data.ok, data.failed, data.trace, data.is_failure) == (None, None, None, failure)
