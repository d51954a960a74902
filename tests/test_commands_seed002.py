"""Seed 002's replay tests ("Verify with replay tests"), one test each, on the command store
(SQLite and PostgreSQL) and, where the events leave it, on the events topic."""

from __future__ import annotations

import multiprocessing
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtrail.commands import EventStore
from runtrail.commands.relay import OutboxRelay
from runtrail.commands.resume import ResumeRefused, rebuild, resume_run
from runtrail.events import EventCodec
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection import replay, replay_runs, take_snapshot
from runtrail.projection.snapshot import open_sealed
from tests.commands_support import StoreBackend, accept, command
from tests.commands_support import command_backend as command_backend  # (a fixture)
from tests.kafka_fixture import TopicFactory
from tests.support import consume_all


def _lifecycle(store: EventStore, run: str) -> None:
    """A run through most of the seed's commands (ends executing, one intent resolved)."""
    steps: list[tuple[str, dict[str, Any]]] = [
        ("propose_plan", {"planArtifactId": "plan-1", "digest": "sha256:p"}),
        ("validate_plan", {"planArtifactId": "plan-1"}),
        ("reserve_budget", {"budgetId": "tokens", "amount": 1000.0, "unit": "tokens"}),
        ("require_approval", {"actionDigest": "sha256:a", "reason": "deploy"}),
        ("grant_approval", {"actionDigest": "sha256:a", "approvedBy": "alice"}),
        ("record_tool_intent", {"invocationId": "i-1", "toolName": "deploy"}),
        ("record_tool_start", {"invocationId": "i-1"}),
        ("record_tool_outcome", {"invocationId": "i-1", "outcome": "succeeded"}),
        ("commit_budget", {"budgetId": "tokens", "amount": 400.0, "unit": "tokens"}),
        ("require_input", {"requestId": "q-1"}),
        ("provide_input", {"requestId": "q-1"}),
    ]
    version = store.execute(accept(run)).version
    for name, data in steps:
        outcome = store.execute(command(name, run, version, data))
        assert outcome.accepted, (name, outcome.reason)
        version = outcome.version


def _insert_raw(store: EventStore, form: dict[str, Any]) -> None:
    """A stored event as another writer (older or newer code) left it in ``agent_event``."""
    import orjson

    pg = store.dialect == "postgresql"
    mark, json_mark = ("%s", "%s::jsonb") if pg else ("?", "?")
    with store.db.transaction() as cur:
        cur.execute(
            "INSERT INTO agent_event (tenant_id, run_id, sequence, event_id, event_type, "
            "schema_version, occurred_at, recorded_at, actor, causation_event_id, correlation_id, "
            f"data) VALUES ({', '.join([mark] * 8)}, {json_mark}, {mark}, {mark}, {json_mark})",
            (
                form["tenantId"],
                form["runId"],
                int(form["sequence"]),
                form["eventId"],
                form["type"],
                form["schemaVersion"],
                form["occurredAt"],
                form["occurredAt"],
                orjson.dumps(form["actor"]).decode(),
                None,
                form["runId"],
                orjson.dumps(form["data"]).decode(),
            ),
        )


def _raw(
    run: str, sequence: int, event_type: str, version: int, data: dict[str, Any]
) -> dict[str, Any]:
    return {
        "tenantId": "acme",
        "runId": run,
        "sequence": str(sequence),
        "eventId": f"{run}-{sequence}",
        "type": event_type,
        "schemaVersion": version,
        "occurredAt": "2026-01-01T00:00:00.000000Z",
        "actor": {"kind": "agent", "id": "old-writer"},
        "data": data,
    }


def test_replay_from_zero_equals_replay_from_each_valid_snapshot(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open(snapshot_every=4)
    _lifecycle(store, "run-1")
    events = store.events("acme", "run-1")
    from_zero = replay(events)
    assert from_zero == store.load("acme", "run-1")[1]
    for k in range(1, len(events)):
        snapshot = take_snapshot(replay(events[:k]))
        trusted = open_sealed("acme", "run-1", snapshot.projector_version, k, snapshot.sealed())
        assert replay(events[k:], trusted) == from_zero, f"snapshot at {k}"
    stored = store.latest_snapshot("acme", "run-1")  # the one the store sealed itself
    assert stored is not None and stored.last_applied_sequence == 12
    assert replay(events[12:], stored) == from_zero


def test_duplicate_command_delivery_appends_no_duplicate_effect(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    reserve = {"budgetId": "usd", "amount": 10.0, "unit": "usd"}
    store.execute(command("reserve_budget", "run-1", 1, reserve))
    spend = command("commit_budget", "run-1", 2, {**reserve, "amount": 4.0}, key="spend-1")
    outcomes = [command_backend.open().execute(spend) for _ in range(3)]  # redelivered
    assert [o.duplicate for o in outcomes] == [False, True, True]
    assert len({tuple(e["eventId"] for e in o.events) for o in outcomes}) == 1
    _, state = store.load("acme", "run-1")
    assert state is not None and state.budgets["usd"].committed == 4.0
    assert [e.sequence for e in store.events("acme", "run-1")] == [1, 2, 3]


@pytest.mark.parametrize(
    ("name", "data", "needs"),
    [
        ("validate_plan", {"planArtifactId": "p"}, "a proposed plan"),
        ("grant_approval", {"actionDigest": "d", "approvedBy": "a"}, "a pending approval"),
        ("provide_input", {"requestId": "q"}, "a pending input request"),
        ("acknowledge_cancellation", {}, "none was requested"),
        ("record_tool_outcome", {"invocationId": "nope", "outcome": "succeeded"}, "nope"),
        ("deny_approval", {"actionDigest": "d"}, "no approval is pending"),
    ],
)
def test_invalid_transitions_are_rejected(
    command_backend: StoreBackend, name: str, data: dict[str, Any], needs: str
) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    outcome = store.execute(command(name, "run-1", 1, data))
    assert not outcome.accepted and outcome.code == "invalid-transition"
    assert needs in (outcome.reason or "")
    assert store.load("acme", "run-1")[0] == 1 and store.outbox_size() == 1


def test_unknown_event_versions_stop_projection(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    newer = _raw("run-1", 2, "run.approval_required", 9, {"actionDigest": "d", "ttl": 5})
    _insert_raw(store, newer)
    with pytest.raises(ResumeRefused) as halted:
        resume_run(store, "acme", "run-1")
    assert halted.value.code == "projection-halted"
    assert "v9" in halted.value.reason or "version 9" in halted.value.reason


def _race(url: str, index: int, start: Any, results: Any) -> None:
    store = open_store(COMMAND_EVENTS, url)
    grant = command(
        "grant_approval",
        "run-1",
        2,
        {"actionDigest": "sha256:d", "approvedBy": f"op-{index}"},
        key=f"race-{index}",
    )
    start.wait()
    results.put(store.execute(grant).code)
    store.close()


def test_concurrent_commands_produce_one_accepted_sequence(command_backend: StoreBackend) -> None:
    """N writer *processes* on the same observed version (tests/test_commands_store.py races
    threads with their own connections): exactly one is accepted."""
    store = command_backend.open()
    store.execute(accept("run-1"))
    store.execute(command("require_approval", "run-1", 1, {"actionDigest": "sha256:d"}))
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(4), context.Queue()
    procs = [
        context.Process(target=_race, args=(command_backend.url, i, start, results))
        for i in range(4)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    codes = sorted(results.get(timeout=5) for _ in procs)
    assert codes == ["accepted", "stale", "stale", "stale"]
    assert [e.sequence for e in store.events("acme", "run-1")] == [1, 2, 3]


def test_the_rebuilt_projection_matches_the_online_one(
    command_backend: StoreBackend, kafka_bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    """Rebuilt from the store, and by the projector from the events topic the relay fed."""
    store = command_backend.open(snapshot_every=5)
    for i in range(3):
        _lifecycle(store, f"run-{i}")
    store.execute(accept("run-cancelled"))
    store.execute(command("request_cancellation", "run-cancelled", 1))
    store.execute(command("acknowledge_cancellation", "run-cancelled", 2))
    online = {run: store.load(tenant, run)[1] for tenant, run in store.runs("acme")}
    for run, state in online.items():
        assert rebuild(store, "acme", run).state == state
    topic = kafka_topic_factory(3)
    relay = OutboxRelay(
        store,
        topic,
        {"bootstrap.servers": kafka_bootstrap},
        {"bootstrap.servers": kafka_bootstrap},
        transactional_id=f"relay-{topic}",
    )
    total = relay.drain()
    relay.close()
    codec = EventCodec()
    messages = consume_all(kafka_bootstrap, topic, expect=total)
    folded = replay_runs(codec.decode(m.value()).event for m in messages)
    assert not folded.halted
    assert {run: state for (_, run), state in folded.projections.items()} == online


def test_cancelled_and_terminal_runs_cannot_resume(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    for run, ending in (
        ("c", "acknowledge_cancellation"),
        ("s", "complete_run"),
        ("f", "fail_run"),
    ):
        store.execute(accept(run))
        if ending == "acknowledge_cancellation":
            store.execute(command("request_cancellation", run, 1))
        version = store.load("acme", run)[0]
        data = {"reason": "boom"} if ending == "fail_run" else {}
        assert store.execute(command(ending, run, version, data)).accepted
        with pytest.raises(ResumeRefused) as refused:
            resume_run(store, "acme", run)
        assert refused.value.code in ("run-cancelled", "run-terminal")
        again = store.execute(
            command("reserve_budget", run, version + 1, {"budgetId": "b", "amount": 1, "unit": "u"})
        )
        assert again.code == "run-terminal"


def test_old_events_still_upcast(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    _insert_raw(
        store, _raw("run-old", 1, "run.accepted", 1, {"goalRef": "g", "policyVersion": "p"})
    )
    _insert_raw(
        store,
        _raw("run-old", 2, "run.approval_required", 1, {"actionDigest": "sha256:d", "reason": "r"}),
    )
    written = store.stored_events("acme", "run-old")
    assert [f["schemaVersion"] for f in written] == [1, 1]  # history is never rewritten
    current = store.events("acme", "run-old")
    assert current[1].schema_version == 2 and current[1].data.expires_at is None  # type: ignore[attr-defined]
    state = replay(current)
    assert state.status == "awaiting_approval" and state.approval_expires_at is None
    codec = EventCodec()
    assert codec.decode(codec.encode_json_form(written[1])).event == current[1]


def test_redacted_content_fails_safely(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    store.execute(command("require_approval", "run-1", 1, {"actionDigest": "sha256:d"}))
    masked = store.execute(
        command("grant_approval", "run-1", 2, {"actionDigest": "[REDACTED]", "approvedBy": "a"})
    )
    assert masked.code == "invalid-transition" and "redacted" in (masked.reason or "")
    assert store.load("acme", "run-1")[0] == 2  # nothing was guessed, nothing appended
    text = store.execute(
        command(
            "deny_approval", "run-1", 2, {"actionDigest": "sha256:d", "reason": "key [REDACTED]"}
        )
    )
    assert text.accepted  # descriptive text is kept verbatim, never interpreted
    assert "[REDACTED]" in (store.load("acme", "run-1")[1].terminal_reason or "")  # type: ignore[union-attr]


def test_reprocessing_never_calls_external_systems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(COMMAND_EVENTS, sqlite_url(tmp_path / "commands.db"), snapshot_every=3)
    _lifecycle(store, "run-1")
    store.execute(accept("run-2"))
    store.execute(
        command("record_tool_intent", "run-2", 1, {"invocationId": "i", "toolName": "mail"})
    )
    online = {run: store.load("acme", run)[1] for run in ("run-1", "run-2")}
    called: list[str] = []

    def external(*args: Any, **kwargs: Any) -> Any:
        called.append("network")
        raise AssertionError("reprocessing opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", external)
    monkeypatch.setattr(socket, "create_connection", external)
    hook: Callable[[Any], Any] = lambda open_: called.append(open_.tool_name)  # noqa: E731
    for _ in range(2):
        for run, state in online.items():
            assert rebuild(store, "acme", run).state == state  # never asks a hook
    report = resume_run(store, "acme", "run-1", reconcilers={"deploy": hook})
    assert report.reconciled == [] and report.unresolved == []
    assert called == []
    store.close()
