"""Duplicate delivery appends no duplicate effect, over a real broker.

The runtime drops a duplicate it can see (same eventId within its window); after a restart it
has forgotten the run, so the redelivered events reach the projector itself, which must see
that their sequences were applied already. Budgets and token totals are sums: a duplicate
that got through would show as a doubled amount.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtrail.projection import replay as pure_replay
from tests.projection_support import Run
from tests.projector_support import (
    InProcessProjector,
    forms,
    projection_at,
    replay,
    sqlite_url,
    wait_caught_up,
)
from tests.support import create_topic, produce_forms, unique_topic

pytestmark = [pytest.mark.kafka]
PARTITIONS = 2


def _run() -> Run:
    r = Run("dup")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("budget.reserved", {"budgetId": "usd", "amount": 100, "unit": "usd"})
    r.add("budget.committed", {"budgetId": "usd", "amount": 30, "unit": "usd"})
    r.add(
        "model.operation_completed",
        {"provider": "p", "modelId": "m", "inputTokens": 10, "outputTokens": 5},
    )
    r.add("tool.invocation_requested", {"invocationId": "inv-1", "toolName": "charge"})
    r.add("tool.invocation_succeeded", {"invocationId": "inv-1", "resultDigest": "sha256:r"})
    r.add("budget.committed", {"budgetId": "usd", "amount": 20, "unit": "usd"})
    return r


def test_duplicate_delivery_appends_no_duplicate_effect(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("proj-dup"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    events = forms(_run())
    first, last = events[:6], events[6]
    # a resend right away (an ambiguous delivery timeout): the runtime's window catches it
    produce_forms(kafka_bootstrap, topic, [*first, first[2]])
    db = tmp_path / "live.db"
    service = InProcessProjector(kafka_bootstrap, topic, db)
    try:
        wait_caught_up(kafka_bootstrap, db, topic, PARTITIONS)
    finally:
        assert service.stop() == 0
    # after a restart the runtime remembers nothing: these reach the projector
    produce_forms(kafka_bootstrap, topic, [first[2], first[3], first[5], last, last])
    service = InProcessProjector(kafka_bootstrap, topic, db)
    try:
        wait_caught_up(kafka_bootstrap, db, topic, PARTITIONS)
        duplicates = service.sample("runtrail_projection_events_total", outcome="duplicate")
        applied = service.sample("runtrail_projection_events_total", outcome="applied")
    finally:
        assert service.stop() == 0
    assert (applied, duplicates) == (1, 3)  # the last event's own resend: the runtime's
    with projection_at(db) as store:
        row = store.get("t1", "dup")
    assert row is not None and not row.halted and row.state is not None
    state = row.state
    assert state.budgets["usd"].committed == 50  # 30 + 20, each once
    assert (state.model_operations, state.tokens.input_tokens) == (1, 10)
    assert list(state.tool_outcomes) == ["inv-1"]
    assert state.version == 7
    from runtrail.events import validate_json_form

    assert state == pure_replay([validate_json_form(f) for f in events])
    # the rebuild reads every copy (no runtime in between) and still agrees
    status, out, err = replay(
        kafka_bootstrap, topic, tmp_path / "rebuilt.db", "--compare-with", sqlite_url(db)
    )
    assert status == 0, out + err
    assert "duplicates: 5" in out
