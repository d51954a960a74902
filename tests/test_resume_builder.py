"""How the service turns the event stream into entries and intents (pure; no I/O)."""

from __future__ import annotations

from typing import Any

from runtrail.events import Event, validate_json_form
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.resume.keys import Kind, model_key, tool_key
from tests.support import form

PROMPT = {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}


def events(
    *specs: tuple[str, dict[str, Any]], run: str = "run-1", tenant: str = "acme", step: int = 1
) -> list[Event]:
    return [
        validate_json_form(form(t, run, i + 1, data, tenant=tenant, step=step))
        for i, (t, data) in enumerate(specs)
    ]


def build(
    evts: list[Event], builder: EntryBuilder | None = None
) -> tuple[EntryBuilder, WriteBatch]:
    builder = builder or EntryBuilder()
    out = WriteBatch()
    for e in evts:
        builder.feed(e, 0, out)
    return builder, out


def test_model_entry_at_step_end_with_concatenated_text_and_latest_raw() -> None:
    _, out = build(
        events(
            ("MODEL_REQUEST", {"prompt": PROMPT}),
            ("MODEL_RESPONSE", {"message": "Hel", "raw": {"id": 1}}),
            ("MODEL_RESPONSE", {"message": "lo", "raw": None}),
            ("MODEL_RESPONSE", {"message": None, "raw": {"id": 2}}),
        )
    )
    assert out.entries == {}  # not before STEP_END
    _, out = build(
        events(
            ("MODEL_REQUEST", {"prompt": PROMPT}),
            ("MODEL_RESPONSE", {"message": "Hel", "raw": {"id": 1}}),
            ("MODEL_RESPONSE", {"message": "lo", "raw": None}),
            ("MODEL_RESPONSE", {"message": None, "raw": {"id": 2}}),
            ("STEP_END", {"reason": "done"}),
        )
    )
    (entry,) = out.entries.values()
    assert entry.kind is Kind.MODEL and entry.key == model_key(PROMPT)
    assert entry.result == {"message": "Hello", "raw": {"id": 2}}
    assert entry.tenant_id == "acme" and entry.run_id == "run-1" and entry.step == 1


def test_errored_and_retried_model_calls_are_not_cached_as_completed() -> None:
    _, out = build(events(("MODEL_REQUEST", {"prompt": PROMPT}), ("STEP_END", {"reason": "error"})))
    assert out.entries == {}
    _, out = build(
        events(
            ("MODEL_REQUEST", {"prompt": PROMPT}),
            ("MODEL_RESPONSE", {"message": "partial", "raw": None}),
            ("MODEL_RETRY", {"attempt": 1, "reason": "timeout"}),
            ("STEP_END", {"reason": "error"}),
        )
    )
    assert out.entries == {}
    _, out = build(
        events(
            ("MODEL_REQUEST", {"prompt": PROMPT}),
            ("MODEL_RESPONSE", {"message": "partial", "raw": None}),
            ("MODEL_RETRY", {"attempt": 1, "reason": "timeout"}),
            ("MODEL_REQUEST", {"prompt": PROMPT}),
            ("MODEL_RESPONSE", {"message": "whole", "raw": None}),
            ("STEP_END", {"reason": "done"}),
        )
    )
    assert [e.result["message"] for e in out.entries.values()] == ["whole"]


def test_tool_result_closes_the_intent_and_only_success_is_cached() -> None:
    builder, out = build(
        events(("TOOL_CALL", {"callId": "c1", "toolName": "charge", "arguments": {"amount": 5}}))
    )
    ((intent, _),) = [v for v in out.intents.values() if v is not None]
    assert intent.key == tool_key("charge", {"amount": 5}) and intent.call_id == "c1"
    assert builder.open_intent("acme", "run-1", intent.key) == intent

    _, out = build(
        [
            validate_json_form(
                form(
                    "TOOL_RESULT",
                    "run-1",
                    2,
                    {"callId": "c1", "toolName": "charge", "output": {"id": "ch_1"}},
                    tenant="acme",
                )
            )
        ],
        builder,
    )
    (entry,) = out.entries.values()
    assert entry.kind is Kind.TOOL and entry.result == {"id": "ch_1"} and entry.call_id == "c1"
    assert list(out.intents.values()) == [None]
    assert builder.open_intent("acme", "run-1", intent.key) is None

    builder, _ = build(
        events(("TOOL_CALL", {"callId": "c2", "toolName": "charge", "arguments": {}}))
    )
    _, out = build(
        [
            validate_json_form(
                form(
                    "TOOL_RESULT",
                    "run-1",
                    2,
                    {"callId": "c2", "toolName": "charge", "error": "declined"},
                    tenant="acme",
                )
            )
        ],
        builder,
    )
    assert out.entries == {} and list(out.intents.values()) == [None]


def test_run_sequence_and_tenant_scoping() -> None:
    builder = EntryBuilder()
    out = WriteBatch()
    for tenant in ("acme", "globex"):
        for e in events(
            ("MODEL_REQUEST", {"prompt": PROMPT}),
            ("MODEL_RESPONSE", {"message": tenant, "raw": None}),
            ("STEP_END", {"reason": "done"}),
            tenant=tenant,
        ):
            builder.feed(e, 0, out)
    assert out.runs[("acme", "run-1")][0] == 3 and out.runs[("globex", "run-1")][0] == 3
    by_tenant = {e.tenant_id: e.result["message"] for e in out.entries.values()}
    assert by_tenant == {"acme": "acme", "globex": "globex"}
