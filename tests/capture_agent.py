"""A scripted agent for the capture end-to-end tests (no tests here).

It publishes, through the real :class:`~runtrail.publisher.Publisher`, several runs of two
tenants interleaved at random, covering what seed 000 §1 makes easy to get wrong: streamed
responses with the raw payload only on the last delta, reasoning segments, retries (a repeated
request), every token key spelling and a real 0, text-only responses, tool calls with a callId,
with only a tool name, with neither, two unnamed calls of one tool in one step (first in, first
out), orphan TOOL_RESULTs, and optionally a run whose last step never ends.

Besides the events, the script knows what each node's record must hold — worked out here from
what it publishes, not by a pairer — so a test can check the records against an oracle of its
own as well as against the library's pairer.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events.runtime_events import ToolCall, ToolResult
from runtrail.publisher import Publisher

USAGES: tuple[tuple[dict[str, int], int | None, int | None], ...] = (
    ({"prompt_tokens": 120, "completion_tokens": 0}, 120, 0),  # a real 0, not "absent"
    ({"promptTokens": 80, "completionTokens": 12}, 80, 12),
    ({"input": 64, "output": 9}, 64, 9),
    ({"input_tokens": 50}, 50, None),  # output absent: null, never 0
)
MODELS = ("glm-5.1", "gpt-x")


@dataclass(frozen=True)
class Call:
    """One ``Publisher.publish`` call of the script."""

    event_type: str
    run_id: str
    data: dict[str, Any]
    tenant: str
    session: str
    turn: str | None
    step: int | None


@dataclass
class Script:
    """The interleaved calls, and the expected content of every record by nodeId."""

    calls: list[Call] = field(default_factory=list)
    #: ``(tenant, nodeId, fields)`` of every record the calls must produce; nodeIds repeat
    #: when a step calls one unnamed tool twice.
    expected: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    @property
    def record_count(self) -> int:
        return len(self.expected)


class _Run:
    def __init__(self, script: Script, run_id: str, tenant: str) -> None:
        self.script = script
        self.run_id = run_id
        self.tenant = tenant
        self.calls: list[Call] = []

    def emit(
        self, event_type: str, data: dict[str, Any], turn: str | None, step: int | None
    ) -> None:
        call = Call(event_type, self.run_id, data, self.tenant, f"sess-{self.run_id}", turn, step)
        self.calls.append(call)

    def expect(self, node_id: str, **fields: Any) -> None:
        self.script.expected.append((self.tenant, node_id, fields))


def _model_step(run: _Run, index: int, turn: str, step: int) -> None:
    where = f"{run.run_id}|{turn}|{step}"
    prompt = {
        "model": MODELS[index % 2],
        "messages": [{"role": "user", "content": f"question {index}.{step}"}],
        "temperature": 0,
    }
    run.emit("MODEL_REQUEST", {"prompt": prompt}, turn, step)
    retries = 0
    if (index + step) % 3 == 0:  # a retry: counted, and the repeated request is the input
        run.emit("MODEL_RETRY", {"attempt": 1, "reason": "rate limited"}, turn, step)
        retries = 1
        prompt = {**prompt, "temperature": 0.1}
        run.emit("MODEL_REQUEST", {"prompt": prompt}, turn, step)
    reasoning = [f"thought {n} of {where}" for n in range(1 + (index + step) % 2)]
    for text in reasoning:
        run.emit("MODEL_REASONING", {"text": text}, turn, step)
    deltas = [f"<{where}:{n}>" for n in range(1 + (index + step) % 3)]
    usage, tokens_in, tokens_out = USAGES[(index + step) % len(USAGES)]
    raw: dict[str, Any] | None = {"id": f"resp-{where}", "usage": usage}
    if (index + step) % 5 == 4:  # text only: no raw payload at all
        raw, tokens_in, tokens_out = None, None, None
    for n, delta in enumerate(deltas):
        last = n == len(deltas) - 1
        run.emit("MODEL_RESPONSE", {"message": delta, "raw": raw if last else None}, turn, step)
    run.expect(
        f"model@{where}",
        nodeType="MODEL",
        modelId=prompt["model"],
        inputs=prompt,
        outputText="".join(deltas),
        outputs=raw,
        reasoningText="\n".join(reasoning),
        retryCount=retries,
        inputTokens=tokens_in,
        outputTokens=tokens_out,
    )


def _tool_calls(run: _Run, index: int, turn: str, step: int) -> None:
    where = f"{run.run_id}|{turn}|{step}"
    variant = (index + step) % 4
    if variant == 0:
        keyed = [(f"call-{step}", "search", f"call-{step}")]
    elif variant == 1:
        keyed = [(None, "lookup_order", "lookup_order")]
    elif variant == 2:
        keyed = [(None, None, "anon")]
    else:  # two unnamed calls of one tool in a step: results pair first in, first out
        keyed = [(None, "search", "search"), (None, "search", "search")]
    for n, (call_id, tool, _) in enumerate(keyed):
        arguments = {"query": f"q{index}.{step}.{n}"}
        run.emit(
            "TOOL_CALL", {"callId": call_id, "toolName": tool, "arguments": arguments}, turn, step
        )
    for n, (call_id, tool, key) in enumerate(keyed):
        output = {"hits": [f"doc-{index}-{step}-{n}"]}
        result = {"callId": call_id, "toolName": tool, "output": output, "error": None}
        run.emit("TOOL_RESULT", result, turn, step)
        inputs = {
            "callId": call_id,
            "toolName": tool,
            "arguments": {"query": f"q{index}.{step}.{n}"},
        }
        run.expect(
            f"tool@{where}|{key}",
            nodeType="TOOL",
            inputs=ToolCall.model_validate(inputs).model_dump(by_alias=True),
            outputs=ToolResult.model_validate(result).model_dump(by_alias=True),
        )


def agent_run(script: Script, index: int, tenant: str, hang: bool) -> _Run:
    """The calls of one run (and its expectations)."""
    run = _Run(script, f"run-{index:04d}", tenant)
    run.emit("run.accepted", {"goalRef": f"goal://{index}", "policyVersion": "p-1"}, None, None)
    turns = [("turn-1", 1), ("turn-1", 2), ("turn-2", 1)]
    for turn, step in turns[: 1 + index % 3]:
        _model_step(run, index, turn, step)
        _tool_calls(run, index, turn, step)
        run.emit("STEP_END", {"reason": "tool_use"}, turn, step)
    if index % 4 == 1:  # a result nobody asked for: captured without input
        result = {
            "callId": f"ghost-{index}",
            "toolName": "webhook",
            "output": "pushed",
            "error": None,
        }
        run.emit("TOOL_RESULT", result, "turn-1", 9)
        run.expect(
            f"tool@{run.run_id}|turn-1|9|ghost-{index}",
            nodeType="TOOL",
            inputs=None,
            outputs=ToolResult.model_validate(result).model_dump(by_alias=True),
        )
    if hang:  # the agent dies mid-step: no STEP_END, no record (until idle expiry)
        run.emit("MODEL_REQUEST", {"prompt": {"model": "glm-5.1", "messages": []}}, "turn-9", 1)
        run.emit("MODEL_RESPONSE", {"message": "half an ans", "raw": None}, "turn-9", 1)
        return run
    run.emit("run.succeeded", {"resultRef": f"blob://{index}"}, None, None)
    return run


def script(runs: int, *, seed: int = 3, hang: int | None = None, concurrent: int = 12) -> Script:
    """``runs`` runs of tenants acme and globex, interleaved; run ``hang`` never ends a step."""
    rng = random.Random(seed)
    out = Script()
    pending = [agent_run(out, i, ("acme", "globex")[i % 2], i == hang).calls for i in range(runs)]
    active: list[Iterator[Call]] = []
    while pending or active:
        while pending and len(active) < concurrent:
            active.append(iter(pending.pop(0)))
        pick = rng.randrange(len(active))
        call = next(active[pick], None)
        if call is None:
            active.pop(pick)
        else:
            out.calls.append(call)
    return out


def projected(tenant: str, record: dict[str, Any], fields: Iterable[str]) -> str:
    """``tenant nodeId {fields}`` of a record's JSON form, comparable with :attr:`Script.expected`."""
    chosen = {name: record[name] for name in fields}
    return (
        f"{tenant} {record['nodeId']} {orjson.dumps(chosen, option=orjson.OPT_SORT_KEYS).decode()}"
    )


def oracle(script: Script) -> Counter[str]:
    """The expected records, projected to the fields the script knows."""
    return Counter(projected(t, {"nodeId": n, **f}, f) for t, n, f in script.expected)


def observed(script: Script, records: Iterable[dict[str, Any]]) -> Counter[str]:
    """Captured records (JSON forms), projected like :func:`oracle`."""
    fields = {f["nodeType"]: list(f) for _, _, f in script.expected}
    return Counter(projected(r["tenantId"], r, fields[r["nodeType"]]) for r in records)


def publish(
    bootstrap: str, topic: str, calls: list[Call], spool: Path, per_second: float | None = None
) -> None:
    """Publish the calls in order (optionally paced); fails if anything was not delivered."""
    settings = Settings(bootstrap_servers=bootstrap, events_topic=topic, spool_dir=spool)
    publisher = Publisher(settings, registry=CollectorRegistry())
    started = time.monotonic()
    try:
        for n, call in enumerate(calls):
            publisher.publish(
                call.event_type,
                call.run_id,
                call.data,
                session_id=call.session,
                turn_id=call.turn,
                step=call.step,
                tenant_id=call.tenant,
            )
            if per_second and n % 50 == 49:
                ahead = (n + 1) / per_second - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        publisher.flush(60)
        stats = publisher.stats()
    finally:
        publisher.close()
    assert stats.rejected == 0 and stats.spooled == 0, f"not all published: {stats}"


def publish_in_background(
    bootstrap: str, topic: str, calls: list[Call], spool: Path, per_second: float
) -> threading.Thread:
    """The agent running beside the consumer; join the thread to know it is done."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            publish(bootstrap, topic, calls, spool, per_second)
        except BaseException as exc:  # surfaced by the test through thread.errors
            errors.append(exc)

    thread = threading.Thread(target=run, name="scripted-agent", daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread
