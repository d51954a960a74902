"""Bytes that are kept hold only their length: orjson's bytes hold its whole write buffer
(8 KB for a 600-byte event) for as long as they live, and the services keep them by the
thousand (a session's every event, a flush interval's audit links, capture lines waiting for
their write). ``tracemalloc`` counts what each kept object really holds."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

from bench.workload import workload
from runtrail.events import EventCodec, canonical_bytes
from runtrail.sessions import AgentSession
from tests.capture_support import sample_records

EVENTS = list(workload(600))


def _held_each(make: Callable[[], list[Any]]) -> float:
    """Bytes of traced memory each of the objects ``make`` returns holds while kept."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = make()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return held / len(kept)


def test_canonical_bytes_hold_their_length() -> None:
    texts: list[bytes] = []
    held = _held_each(lambda: texts.extend(canonical_bytes(e) for e in EVENTS) or texts)
    mean = sum(map(len, texts)) / len(texts)
    assert held < mean + 200, f"{held:.0f} bytes held for {mean:.0f}-byte texts"


def test_capture_lines_hold_their_length() -> None:
    records = sample_records() * 300
    lines: list[bytes] = []
    held = _held_each(lambda: lines.extend(r.to_json_line() for r in records) or lines)
    mean = sum(map(len, lines)) / len(lines)
    assert held < mean + 200, f"{held:.0f} bytes held for {mean:.0f}-byte lines"


def test_a_session_holds_its_events_canonical_bytes() -> None:
    codec = EventCodec()
    values = [codec.encode_json_form(form) for form in EVENTS]
    events = [codec.decode_event_only(v, "2026-01-01T00:00:00.000Z") for v in values]
    sessions: dict[tuple[str, str], AgentSession] = {}

    def apply_all() -> list[Any]:
        for offset, event in enumerate(events):
            assert event.session_id is not None
            key = (event.tenant_id, event.session_id)
            session = sessions.setdefault(key, AgentSession(*key))
            session.apply(event, source=("events", 0, offset))
        return events

    held = _held_each(apply_all)
    canonical = sum(len(canonical_bytes(e.json_form())) for e in events) / len(events)
    # its canonical bytes and its place in the log; its JSON form is parsed only when read
    # (kept beside the bytes it was 2.3 KB, and 10 KB before the bytes held their length)
    assert held < canonical + 500, f"{held:.0f} bytes held for {canonical:.0f}-byte events"
