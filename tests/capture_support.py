"""Builders of runtime events for the capture tests (no tests here).

Named ``test_capture_*`` only because that is the capture area's file pattern. Events are
built as JSON forms and validated with ``validate_json_form``, exactly as a consumer would.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from runtrail.capture import NodeIoRecord, NodePairer
from runtrail.events import CURRENT_VERSIONS, Event, validate_json_form

T0_MS = 1_714_557_600_000  # 2024-05-01T10:00:00Z


def iso(ms: int) -> str:
    """An epoch-millisecond instant as an ISO-8601 UTC timestamp with a ``Z``."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class RunEvents:
    """Events of one run: sequence numbers and times advance with every event built."""

    def __init__(
        self,
        run_id: str = "run-1",
        tenant: str = "acme",
        session: str | None = "sess-1",
        start_ms: int = T0_MS,
        tick_ms: int = 100,
    ) -> None:
        self.run_id = run_id
        self.tenant = tenant
        self.session = session
        self.now_ms = start_ms
        self.tick_ms = tick_ms
        self.sequence = 0

    def form(
        self, event_type: str, data: dict[str, Any], turn: str | None = "t1", step: int | None = 1
    ) -> dict[str, Any]:
        """The JSON form of the next event of this run."""
        self.sequence += 1
        form: dict[str, Any] = {
            "eventId": f"{self.tenant}-{self.run_id}-e{self.sequence}",
            "runId": self.run_id,
            "tenantId": self.tenant,
            "sequence": str(self.sequence),
            "type": event_type,
            "schemaVersion": CURRENT_VERSIONS[event_type],
            "occurredAt": iso(self.now_ms),
            "actor": {"kind": "agent", "id": "agent-1"},
            "correlationId": f"corr-{self.run_id}",
            "sessionId": self.session,
            "turnId": turn,
            "step": step,
            "data": data,
        }
        self.now_ms += self.tick_ms
        return form

    def event(
        self, event_type: str, data: dict[str, Any], turn: str | None = "t1", step: int | None = 1
    ) -> Event:
        return validate_json_form(self.form(event_type, data, turn, step))

    def request(self, prompt: Any, **where: Any) -> Event:
        return self.event("MODEL_REQUEST", {"prompt": prompt}, **where)

    def response(self, message: str | None = None, raw: Any = None, **where: Any) -> Event:
        return self.event("MODEL_RESPONSE", {"message": message, "raw": raw}, **where)

    def reasoning(self, text: str, **where: Any) -> Event:
        return self.event("MODEL_REASONING", {"text": text}, **where)

    def retry(self, attempt: int, reason: str | None = None, **where: Any) -> Event:
        return self.event("MODEL_RETRY", {"attempt": attempt, "reason": reason}, **where)

    def call(
        self,
        call_id: str | None = None,
        tool: str | None = None,
        arguments: Any = None,
        **where: Any,
    ) -> Event:
        data = {"callId": call_id, "toolName": tool, "arguments": arguments}
        return self.event("TOOL_CALL", data, **where)

    def result(
        self,
        call_id: str | None = None,
        tool: str | None = None,
        output: Any = None,
        error: str | None = None,
        **where: Any,
    ) -> Event:
        data = {"callId": call_id, "toolName": tool, "output": output, "error": error}
        return self.event("TOOL_RESULT", data, **where)

    def step_end(self, reason: str | None = "done", **where: Any) -> Event:
        return self.event("STEP_END", {"reason": reason}, **where)


def prompt(model: str = "glm-5.1", text: str = "What is 2+2?") -> dict[str, Any]:
    """A small provider-neutral prompt object."""
    return {"model": model, "messages": [{"role": "user", "content": text}], "temperature": 0}


def feed_all(
    pairer: NodePairer, events: Iterable[Event], partition: int = 0, start_offset: int = 0
) -> list[NodeIoRecord]:
    """Feed events at consecutive offsets; all records they close, in order."""
    records: list[NodeIoRecord] = []
    for offset, event in enumerate(events, start_offset):
        records.extend(pairer.feed(event, partition, offset, now_ms=0))
    return records


def drain(pairer: NodePairer) -> list[NodeIoRecord]:
    """The stream goes quiet: runs picked up mid-way (after a resume) stop waiting for an
    earlier sequence, and what they buffered is paired (open nodes stay open)."""
    return pairer.expire_idle(now_ms=3_600_000, idle_ms=10**12)


def model_step(run: RunEvents, step: int = 1, answer: str = "4") -> list[Event]:
    """A whole MODEL node: request, one response with usage, step end."""
    raw = {"id": f"r{step}", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
    return [
        run.request(prompt(), step=step),
        run.response(answer, raw, step=step),
        run.step_end(step=step),
    ]


def sample_records() -> list[NodeIoRecord]:
    """``[MODEL record, TOOL record]`` of a small run (for sink and replay tests)."""
    run = RunEvents()
    events = [
        run.request(prompt()),
        run.reasoning("add the numbers"),
        run.response("The answer", None),
        run.response(" is 4.", {"id": "resp-1", "usage": {"input_tokens": 9, "output_tokens": 4}}),
        run.call("c1", "calculator", {"expression": "2+2"}),
        run.result("c1", "calculator", {"value": 4}),
        run.step_end(),
    ]
    return sorted(feed_all(NodePairer(), events), key=lambda r: r.node_type)


def tool_records(
    count: int, run_id: str = "run-1", tenant: str = "acme", start_ms: int = T0_MS
) -> list[NodeIoRecord]:
    """``count`` TOOL records of one run (call and result each), in capture order."""
    run = RunEvents(run_id, tenant=tenant, start_ms=start_ms)
    events: list[Event] = []
    for index in range(count):
        events += [
            run.call(f"c{index}", "echo", {"i": index}),
            run.result(f"c{index}", "echo", f"out-{index}"),
        ]
    return feed_all(NodePairer(), events)
