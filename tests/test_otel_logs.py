"""The join of GenAI log records to their spans: each record with its own span, or counted."""

from __future__ import annotations

from runtrail.adapters.otel_logs import LogJoin, LogView, event_name
from runtrail.adapters.otel_spans import SpanView

TRACE = "5b8efff798038103d269b633813fc60c"


def span(span_id: str) -> SpanView:
    return SpanView(TRACE, span_id, None, "chat m", 1, 2, {"gen_ai.operation.name": "chat"})


def record(span_id: str, name: str = "gen_ai.user.message", body: object = None) -> LogView:
    return LogView(TRACE, span_id, name, {"gen_ai.system": "openai"}, body)


def test_a_record_joins_its_own_span_as_an_event_with_its_body_as_attributes() -> None:
    join = LogJoin()
    assert not join.add([record("a" * 16, body={"content": "hi"}), record("b" * 16)])
    first, second = join.attach([span("a" * 16), span("c" * 16)])
    assert [e.name for e in first.events] == ["gen_ai.user.message"]
    assert first.events[0].attributes == {"gen_ai.system": "openai", "content": "hi"}
    assert second.events == ()  # not another span's records
    assert join.waiting == 1


def test_what_cannot_be_joined_is_counted_by_reason() -> None:
    join = LogJoin()
    join.attach([span("a" * 16)])
    refused = join.add(
        [
            record("a" * 16),  # its span was recorded already
            record("b" * 16, name="app.log"),
            LogView("", "", "gen_ai.choice", {}),
        ]
    )
    assert refused == {"log-after-span": 1, "log-not-genai": 1, "log-without-span": 1}
    assert join.waiting == 0


def test_waiting_records_are_bounded_and_the_forgotten_ones_counted() -> None:
    join = LogJoin(max_waiting=2)
    assert join.add([record(f"{n:016x}") for n in range(5)]) == {"log-waited-too-long": 3}
    assert join.waiting == 2 and join.evicted == 3


def test_the_event_name_comes_from_the_record_or_its_event_name_attribute() -> None:
    assert event_name("gen_ai.choice", {}) == "gen_ai.choice"
    assert event_name("", {"event.name": "gen_ai.choice"}) == "gen_ai.choice"
    assert event_name("", {}) == ""
