"""A realistic event stream: agent runs made of steps with prompts, streamed responses, tools.

Each run: run.accepted, then per step MODEL_REQUEST (a prompt that grows with the
conversation), MODEL_REASONING, three streamed MODEL_RESPONSE deltas (the raw payload with
usage on the last), TOOL_CALL + TOOL_RESULT, STEP_END, and a model.operation_completed; the
run ends with run.succeeded. Sizes land between ~150 bytes and ~2 KB per event, like real runs;
eventIds are version 7 UUIDs growing with the stream, as the publisher stamps them.
Deterministic for a given seed, so every benchmark run measures the same bytes.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

_WORDS = [
    *("incident", "customer", "refund", "order", "policy", "ticket", "summary", "escalate"),
    *("database", "latency", "deploy", "rollback", "invoice", "shipment", "warehouse"),
    *("contract", "renewal", "quota", "region", "cluster", "outage"),
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _event(
    run: str,
    seq: int,
    etype: str,
    data: dict[str, Any],
    *,
    tenant: str,
    step: int | None,
    rng: random.Random,
) -> dict[str, Any]:
    return {
        "eventId": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "runId": run,
        "tenantId": tenant,
        "sequence": str(seq),
        "type": etype,
        "schemaVersion": 1,
        "occurredAt": f"2026-11-29T10:{(seq // 60) % 60:02d}:{seq % 60:02d}.000Z",
        "recordedAt": None,
        "actor": {"kind": "agent", "id": "bench-agent"},
        "causationEventId": None,
        "correlationId": run,
        "sessionId": f"sess-{run}",
        "turnId": f"turn-{(step or 0) // 4}" if step is not None else None,
        "step": step,
        "data": data,
    }


def run_events(
    run: str, rng: random.Random, *, tenant: str = "bench", steps: int = 8
) -> Iterator[dict[str, Any]]:
    """The JSON-form events of one run, in order."""
    seq = 0

    def nxt() -> int:
        nonlocal seq
        seq += 1
        return seq

    yield _event(
        run,
        nxt(),
        "run.accepted",
        {"goalRef": f"goal://{run}", "policyVersion": "p-7"},
        tenant=tenant,
        step=None,
        rng=rng,
    )
    messages = [
        {"role": "system", "content": _text(rng, 30)},
        {"role": "user", "content": _text(rng, 25)},
    ]
    for step in range(1, steps + 1):
        prompt = {
            "model": "glm-5.1",
            "temperature": 0.2,
            "messages": messages[-6:],
            "tools": [{"name": "search"}, {"name": "lookup_order"}],
        }
        yield _event(
            run, nxt(), "MODEL_REQUEST", {"prompt": prompt}, tenant=tenant, step=step, rng=rng
        )
        yield _event(
            run,
            nxt(),
            "MODEL_REASONING",
            {"text": _text(rng, 20)},
            tenant=tenant,
            step=step,
            rng=rng,
        )
        reply = []
        for part in range(3):
            delta = _text(rng, 8)
            reply.append(delta)
            raw = None
            if part == 2:
                raw = {
                    "id": f"resp-{run}-{step}",
                    "model": "glm-5.1",
                    "usage": {"prompt_tokens": 300 + 40 * step, "completion_tokens": 24},
                    "choices": [{"index": 0, "finish_reason": "tool_calls"}],
                }
            yield _event(
                run,
                nxt(),
                "MODEL_RESPONSE",
                {"message": delta, "raw": raw},
                tenant=tenant,
                step=step,
                rng=rng,
            )
        call = f"call-{step}"
        yield _event(
            run,
            nxt(),
            "TOOL_CALL",
            {
                "callId": call,
                "toolName": "search",
                "arguments": {"query": _text(rng, 4), "limit": 5},
            },
            tenant=tenant,
            step=step,
            rng=rng,
        )
        yield _event(
            run,
            nxt(),
            "TOOL_RESULT",
            {
                "callId": call,
                "toolName": "search",
                "output": {
                    "hits": [
                        {"id": f"doc-{i}", "score": round(rng.random(), 3), "title": _text(rng, 5)}
                        for i in range(3)
                    ]
                },
                "error": None,
            },
            tenant=tenant,
            step=step,
            rng=rng,
        )
        yield _event(
            run, nxt(), "STEP_END", {"reason": "tool_use"}, tenant=tenant, step=step, rng=rng
        )
        yield _event(
            run,
            nxt(),
            "model.operation_completed",
            {
                "provider": "zhipu",
                "modelId": "glm-5.1",
                "promptVersion": "agent@3",
                "toolSchemaVersion": "tools@2",
                "requestId": f"req-{step}",
                "responseId": f"resp-{run}-{step}",
                "outputRef": None,
                "inputTokens": 300 + 40 * step,
                "outputTokens": 24,
                "usageSource": "provider",
            },
            tenant=tenant,
            step=None,
            rng=rng,
        )
        messages.append({"role": "assistant", "content": " ".join(reply)})
        messages.append({"role": "tool", "content": _text(rng, 15)})
    yield _event(
        run,
        nxt(),
        "run.succeeded",
        {"resultRef": f"blob://{run}"},
        tenant=tenant,
        step=None,
        rng=rng,
    )


def workload(
    total: int, *, seed: int = 42, concurrent_runs: int = 64, time_ordered_ids: bool = True
) -> Iterator[dict[str, Any]]:
    """``total`` events from interleaved runs (``concurrent_runs`` in flight at once); their
    eventIds random version 4 UUIDs when not ``time_ordered_ids`` (as writers other than
    runtrail's publisher may stamp them), all else the same."""
    rng = random.Random(seed)
    active: list[Iterator[dict[str, Any]]] = []
    next_run = 0
    produced = 0
    while produced < total:
        while len(active) < concurrent_runs:
            active.append(run_events(f"run-{next_run:07d}", rng))
            next_run += 1
        i = rng.randrange(len(active))
        try:
            event = next(active[i])
        except StopIteration:
            active.pop(i)
            continue
        if time_ordered_ids:
            event["eventId"] = _time_ordered(event["eventId"], _START_MS + produced // 10)
        yield event
        produced += 1


#: 2026-11-29T10:00:00Z in Unix milliseconds: the stream's first eventId time
_START_MS = 1_795_946_400_000


def _time_ordered(event_id: str, ms: int) -> str:
    """The random UUID ``event_id`` made a version 7 one of ``ms``, as the publisher stamps
    them (``new_event_id``): the stream's IDs grow with it, ten a millisecond."""
    random_part = uuid.UUID(event_id).int & ((1 << 76) - 1)  # below the version nibble
    return str(uuid.UUID(int=(ms << 80) | (7 << 76) | random_part))
