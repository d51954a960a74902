"""The event store decides commands under optimistic concurrency, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runtrail.commands import CommandOutcome
from runtrail.persistence.urls import sqlite_url
from runtrail.projection import replay
from tests.commands_support import StoreBackend, accept, command
from tests.commands_support import command_backend as command_backend  # (a fixture)


def test_accepted_command_appends_applies_and_bumps_the_version(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open()
    first = store.execute(accept("run-1"))
    assert first.accepted and first.version == 1
    second = store.execute(
        command("propose_plan", "run-1", 1, {"planArtifactId": "plan-1", "digest": "sha256:aa"})
    )
    assert second.accepted and second.version == 2
    version, state = store.load("acme", "run-1")
    assert version == 2 and state is not None and state.status == "planning"
    events = store.events("acme", "run-1")
    assert [e.sequence for e in events] == [1, 2]
    assert [e.type for e in events] == ["run.accepted", "run.plan_proposed"]
    assert replay(events) == state  # the stored projection is the projector's fold
    assert store.outbox_size() == 2


def test_a_stale_version_is_refused_with_the_current_one(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    store.execute(command("propose_plan", "run-1", 1, {"planArtifactId": "plan-1"}))
    stale = store.execute(command("validate_plan", "run-1", 1, {"planArtifactId": "plan-1"}))
    assert not stale.accepted and stale.code == "stale" and stale.version == 2
    assert "version 2" in (stale.reason or "")
    assert [e.sequence for e in store.events("acme", "run-1")] == [1, 2]


def test_a_duplicate_command_returns_the_first_outcome(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    grant = command("propose_plan", "run-1", 1, {"planArtifactId": "plan-1"}, key="once")
    first = store.execute(grant)
    again = command_backend.open().execute(grant)  # another client, the same delivery
    assert first.accepted and again.accepted and again.duplicate
    assert again.events == first.events and again.version == first.version == 2
    assert len(store.events("acme", "run-1")) == 2
    reused = store.execute(
        command("validate_plan", "run-1", 2, {"planArtifactId": "p"}, key="once")
    )
    assert reused.code == "idempotency-conflict"


def test_invalid_transitions_are_refused_with_the_projectors_reason(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    refused = store.execute(command("validate_plan", "run-1", 1, {"planArtifactId": "plan-1"}))
    assert not refused.accepted and refused.code == "invalid-transition"
    assert "needs a proposed plan" in (refused.reason or "")
    malformed = store.execute(command("reserve_budget", "run-1", 1, {"amount": -1}))
    assert malformed.code == "invalid-command"
    unknown = store.execute(command("launch_rocket", "run-1", 1))
    assert unknown.code == "unknown-command"
    assert store.load("acme", "run-1")[0] == 1


def test_cancelled_and_terminal_runs_refuse_commands(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    store.execute(command("request_cancellation", "run-1", 1, {"requestedBy": "op"}))
    during = store.execute(command("propose_plan", "run-1", 2, {"planArtifactId": "p"}))
    assert during.code == "cancellation-requested"
    assert store.execute(command("acknowledge_cancellation", "run-1", 2)).accepted
    after = store.execute(command("fail_run", "run-1", 3, {"reason": "late"}))
    assert after.code == "run-terminal" and "cancelled" in (after.reason or "")


def test_snapshots_are_sealed_every_n_events(command_backend: StoreBackend) -> None:
    store = command_backend.open(snapshot_every=3)
    store.execute(accept("run-1"))
    for version in range(1, 5):
        data = {"budgetId": "b", "amount": 1.0, "unit": "usd"}
        assert store.execute(command("reserve_budget", "run-1", version, data)).accepted
    snapshot = store.latest_snapshot("acme", "run-1")
    assert snapshot is not None and snapshot.last_applied_sequence == 3


@pytest.mark.parametrize("writers", [8])
def test_concurrent_commands_produce_one_accepted_sequence(
    command_backend: StoreBackend, writers: int
) -> None:
    """Seed 002: N writers race on the same observed version; exactly one wins."""
    setup = command_backend.open()
    setup.execute(accept("run-1"))
    setup.execute(
        command(
            "require_approval", "run-1", 1, {"actionDigest": "sha256:deploy", "reason": "deploy"}
        )
    )
    stores = [command_backend.open() for _ in range(writers)]
    barrier = threading.Barrier(writers)
    outcomes: list[CommandOutcome] = []
    lock = threading.Lock()

    def race(index: int) -> None:
        grant = command(
            "grant_approval",
            "run-1",
            2,
            {"actionDigest": "sha256:deploy", "approvedBy": f"op-{index}"},
        )
        barrier.wait()
        outcome = stores[index].execute(grant)
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    accepted = [o for o in outcomes if o.accepted]
    assert len(accepted) == 1
    assert sorted(o.code for o in outcomes if not o.accepted) == ["stale"] * (writers - 1)
    assert all(o.version == 3 for o in outcomes)
    events = setup.events("acme", "run-1")
    assert [e.sequence for e in events] == [1, 2, 3]
    assert events[-1].type == "run.approval_granted"


def test_every_refusal_is_kept_by_run_and_accepted_ones_are_not(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    store.execute(accept("run-2"))
    plan = command("propose_plan", "run-1", 1, {"planArtifactId": "p"}, key="plan-key")
    assert store.execute(plan).accepted
    assert store.execute(plan).duplicate  # a duplicate is accepted: nothing refused
    stale = store.execute(command("validate_plan", "run-1", 1, {"planArtifactId": "p"}))
    reused = store.execute(command("validate_plan", "run-1", 2, {}, key="plan-key"))
    again = store.execute(command("validate_plan", "run-1", 1, {"planArtifactId": "p"}))
    other = store.execute(command("launch_rocket", "run-2", 1))
    elsewhere = store.execute(command("launch_rocket", "run-1", 2, tenant="globex"))
    kept = command_backend.open().refusals("acme", "run-1")  # another client reads them back
    assert [(r.name, r.code, r.expected_version, r.version) for r in kept] == [
        ("validate_plan", "stale", 1, 2),
        ("validate_plan", "idempotency-conflict", 2, 2),
        ("validate_plan", "stale", 1, 2),
    ]
    assert [r.reason for r in kept] == [stale.reason, reused.reason, again.reason]
    assert kept[1].idempotency_key == "plan-key" and kept[0].actor.id == "op-1"
    assert kept[0].refused_at <= kept[1].refused_at <= kept[2].refused_at
    assert kept[0].refused_at.endswith("Z")
    assert [r.code for r in store.refusals("acme", "run-2")] == [other.code]
    assert [r.code for r in store.refusals("globex", "run-1")] == [elsewhere.code]
    assert [r.code for r in store.refusals("acme", "run-1", limit=1)] == ["stale"]
    assert store.load("acme", "run-1")[0] == 2  # refusals appended nothing


def test_a_store_of_the_first_schema_gains_the_refusals_table(tmp_path: Path) -> None:
    from runtrail.commands.schema import SQLITE
    from runtrail.persistence.migrations import Component
    from runtrail.persistence.sqlite import SqliteDatabase

    path = tmp_path / "commands.db"
    first = SqliteDatabase(path)
    first.migrate([Component("commands", SQLITE.migrations[:1])])
    first.close()
    store = StoreBackend("sqlite", sqlite_url(path)).open()
    store.execute(accept("run-1"))
    assert store.execute(command("launch_rocket", "run-1", 1)).code == "unknown-command"
    assert [r.code for r in store.refusals("acme", "run-1")] == ["unknown-command"]
    store.close()
