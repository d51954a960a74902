"""The SQLite projection store: atomic batches, fences, halts, offsets, snapshots, URLs — and the
shadow rebuild: a fresh store rebuilt from the events matches the online one."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.events import Event
from runtrail.projection import (
    PROJECTOR_VERSION,
    EventCoordinates,
    Halt,
    ProjectionBatch,
    ProjectionError,
    ProjectionSnapshot,
    RunProjection,
    SnapshotMismatch,
    StoreConflict,
    apply_event,
    compare_projections,
    open_projection_store,
    replay,
    replay_runs,
    take_snapshot,
)
from runtrail.projection.store_sqlite import SqliteProjectionStore, sqlite_path
from tests.projection_support import full_run

TOPIC = "runtrail.events"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteProjectionStore]:
    s = SqliteProjectionStore(tmp_path / "projection.db")
    yield s
    s.close()


def state_of(run_id: str, upto: int | None = None, tenant: str = "t1") -> RunProjection:
    events = full_run(run_id, tenant).events
    return replay(events[:upto] if upto else events)


def coords(sequence: int = 3, offset: int | None = 42) -> EventCoordinates:
    return EventCoordinates(
        sequence=sequence,
        event_id="e-3",
        event_type="run.paused",
        schema_version=1,
        topic=TOPIC,
        partition=0,
        offset=offset,
    )


def offsets(store: SqliteProjectionStore) -> dict[int, int]:
    return store.stored_offsets(TOPIC, range(8))


# --- batches ----------------------------------------------------------------------------------
def test_batch_writes_projections_and_offsets(store: SqliteProjectionStore) -> None:
    a, b = state_of("run-a", 5), state_of("run-b")
    store.apply_batch(ProjectionBatch(projections=[a, b], offsets={(TOPIC, 0): 10, (TOPIC, 3): 7}))
    row = store.get("t1", "run-a")
    assert row is not None and row.state == a
    assert (row.status, row.version, row.halted, row.projector_version) == (
        a.status,
        5,
        False,
        PROJECTOR_VERSION,
    )
    assert offsets(store) == {0: 10, 3: 7}
    assert store.stored_offsets(TOPIC, [3]) == {3: 7}
    assert store.stored_offsets("other", [0]) == {}
    assert store.get("t1", "nope") is None


def test_batch_is_atomic_when_a_write_fails_midway(
    store: SqliteProjectionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 3)], offsets={(TOPIC, 0): 3}))
    calls = 0
    real = SqliteProjectionStore._write_projection

    def failing(self: SqliteProjectionStore, cur: sqlite3.Cursor, state: RunProjection) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk full")
        real(self, cur, state)

    monkeypatch.setattr(SqliteProjectionStore, "_write_projection", failing)
    batch = ProjectionBatch(
        projections=[state_of("run-a", 8), state_of("run-b"), state_of("run-c")],
        halts=[Halt("t1", "run-d", "bad", coords())],
        offsets={(TOPIC, 0): 99, (TOPIC, 1): 5},
    )
    with pytest.raises(OSError, match="disk full"):
        store.apply_batch(batch)
    row = store.get("t1", "run-a")
    assert row is not None and row.version == 3  # the first write of the batch was rolled back
    assert store.get("t1", "run-b") is None and store.get("t1", "run-d") is None
    assert offsets(store) == {0: 3}
    monkeypatch.setattr(SqliteProjectionStore, "_write_projection", real)
    store.apply_batch(batch)  # the same batch, retried, goes through whole
    assert offsets(store) == {0: 99, 1: 5}
    assert [r.run_id for r in store.list()] == ["run-a", "run-b", "run-c", "run-d"]


def test_batch_is_atomic_when_an_offset_would_move_back(store: SqliteProjectionStore) -> None:
    store.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 50}))
    with pytest.raises(StoreConflict, match="refusing to move it back to 40"):
        store.apply_batch(
            ProjectionBatch(
                projections=[state_of("run-a")], offsets={(TOPIC, 1): 9, (TOPIC, 0): 40}
            )
        )
    assert store.list() == []
    assert offsets(store) == {0: 50}


def test_projection_never_moves_to_a_lower_version(store: SqliteProjectionStore) -> None:
    store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 10)]))
    store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 10)]))  # same: idempotent
    with pytest.raises(StoreConflict, match="at version 10; refusing to write version 4"):
        store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 4)]))
    row = store.get("t1", "run-a")
    assert row is not None and row.version == 10


# --- halts ---------------------------------------------------------------------------------------
def test_halt_is_visible_and_fences_the_run(store: SqliteProjectionStore) -> None:
    good = state_of("run-a", 5)
    store.apply_batch(
        ProjectionBatch(
            projections=[good],
            halts=[Halt("t1", "run-a", "unknown-event-version: run.paused v1", coords(6))],
            offsets={(TOPIC, 0): 7},
        )
    )
    row = store.get("t1", "run-a")
    assert row is not None
    assert row.halted and row.halt_reason == "unknown-event-version: run.paused v1"
    assert row.halt_coordinates == coords(6)
    assert row.state == good and row.version == 5  # the last good projection stays readable
    with pytest.raises(StoreConflict, match="is halted"):
        store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 9)]))
    store.halt("t1", "run-a", "a later reason", coords(9))
    row = store.get("t1", "run-a")
    assert row is not None and row.halt_reason is not None
    assert row.halt_reason.startswith("unknown-event-version")  # the first halt wins


def test_halt_of_a_run_never_projected(store: SqliteProjectionStore) -> None:
    store.halt("t2", "run-x", "a run's first event must be run.accepted", coords(1, offset=None))
    row = store.get("t2", "run-x")
    assert row is not None
    assert (row.halted, row.state, row.status, row.version) == (True, None, None, 0)
    assert row.halt_coordinates is not None and row.halt_coordinates.offset is None


def test_list_filters(store: SqliteProjectionStore) -> None:
    store.apply_batch(
        ProjectionBatch(
            projections=[
                state_of("run-b"),
                state_of("run-a", 4),
                state_of("run-c", tenant="t2"),
            ],
            halts=[Halt("t1", "run-z", "bad", coords())],
        )
    )
    assert [(r.tenant_id, r.run_id) for r in store.list()] == [
        ("t1", "run-a"),
        ("t1", "run-b"),
        ("t1", "run-z"),
        ("t2", "run-c"),
    ]
    assert [r.run_id for r in store.list(status="succeeded")] == ["run-b", "run-c"]
    assert [r.run_id for r in store.list(status="succeeded", tenant="t2")] == ["run-c"]
    assert [r.run_id for r in store.list(tenant="t1", halted=True)] == ["run-z"]
    assert [r.run_id for r in store.list(halted=False, limit=2)] == ["run-a", "run-b"]


# --- snapshots -----------------------------------------------------------------------------------
def test_snapshot_round_trip(store: SqliteProjectionStore) -> None:
    snapshot = take_snapshot(state_of("run-a", 12))
    assert store.load_snapshot("t1", "run-a") is None
    store.save_snapshot(snapshot)
    assert store.load_snapshot("t1", "run-a") == snapshot
    newer = take_snapshot(state_of("run-a", 20))
    store.apply_batch(ProjectionBatch(snapshots=[newer]))
    loaded = store.load_snapshot("t1", "run-a")
    assert loaded == newer
    events = full_run("run-a").events
    assert replay(events[20:], start=loaded) == replay(events)


def test_snapshot_of_another_projector_version_is_not_trusted(store: SqliteProjectionStore) -> None:
    state = state_of("run-a", 12)
    store.save_snapshot(
        ProjectionSnapshot(
            projector_version=PROJECTOR_VERSION + 1, last_applied_sequence=12, state=state
        )
    )
    with pytest.raises(SnapshotMismatch, match="rebuild from events"):
        store.load_snapshot("t1", "run-a")


def test_unreadable_snapshot_is_not_trusted(store: SqliteProjectionStore, tmp_path: Path) -> None:
    store.save_snapshot(take_snapshot(state_of("run-a", 3)))
    db = sqlite3.connect(tmp_path / "projection.db")
    db.execute('UPDATE projection_snapshots SET state = \'{"status": "weird"}\'')
    db.commit()
    db.close()
    with pytest.raises(SnapshotMismatch, match="unreadable"):
        store.load_snapshot("t1", "run-a")


# --- durability and URLs -------------------------------------------------------------------------
def test_everything_survives_a_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/nested/dir/p.db"
    first = open_projection_store(url)
    first.apply_batch(
        ProjectionBatch(
            projections=[state_of("run-a")],
            halts=[Halt("t1", "run-b", "bad", coords())],
            snapshots=[take_snapshot(state_of("run-a", 4))],
            offsets={(TOPIC, 2): 17},
        )
    )
    first.close()
    again = open_projection_store(url)
    try:
        row = again.get("t1", "run-a")
        assert row is not None and row.state == state_of("run-a")
        assert again.stored_offsets(TOPIC, [0, 1, 2]) == {2: 17}
        assert again.load_snapshot("t1", "run-a") == take_snapshot(state_of("run-a", 4))
        halted = again.get("t1", "run-b")
        assert halted is not None and halted.halted
    finally:
        again.close()


@pytest.mark.parametrize(
    ("rest", "path"),
    [
        ("/rel/p.db", "rel/p.db"),
        ("//abs/p.db", "/abs/p.db"),
        ("/:memory:", ":memory:"),
        ("", ":memory:"),
    ],
)
def test_sqlite_url_paths(rest: str, path: str) -> None:
    assert sqlite_path(rest) == path


def test_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = open_projection_store("sqlite:///state/p.db")
    s.close()
    assert (tmp_path / "state" / "p.db").exists()


def test_memory_store_works() -> None:
    s = open_projection_store("sqlite:///:memory:")
    s.apply_batch(ProjectionBatch(projections=[state_of("run-a")]))
    assert len(s.list()) == 1
    s.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://db/x", "not available yet"),
        ("mysql://db/x", "unsupported"),
        ("p.db", "not a store URL"),
        ("sqlite://host/p.db", "no host"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_projection_store(url)


# --- the shadow rebuild ----------------------------------------------------------------------------
def _stream() -> list[tuple[int, Event]]:
    """Runs spread over 3 partitions (as keyed by run ID), interleaved, one halting midway."""
    runs = [full_run(f"run-{i}", tenant=f"t{i % 2}") for i in range(6)]
    bad = runs[4].events
    bad[7] = Event.model_construct(**{**dict(bad[7]), "schema_version": 9})
    rng = random.Random(7)
    cursors = [0] * len(runs)
    out: list[tuple[int, Event]] = []
    while any(c < len(r.events) for c, r in zip(cursors, runs, strict=True)):
        i = rng.choice([k for k, r in enumerate(runs) if cursors[k] < len(r.events)])
        out.append((i % 3, runs[i].events[cursors[i]]))
        cursors[i] += 1
    return out


def _online(store: SqliteProjectionStore, stream: list[tuple[int, Event]], seed: int) -> None:
    """What the service will do: per batch, apply events, halt runs that fail, advance offsets."""
    rng = random.Random(seed)
    next_offset = [0, 0, 0]
    located = []
    for partition, event in stream:
        located.append((partition, next_offset[partition], event))
        next_offset[partition] += 1
    i = 0
    while i < len(located):
        batch = located[i : i + rng.randint(1, 9)]
        i += len(batch)
        states: dict[tuple[str, str], RunProjection] = {}
        halts: list[Halt] = []
        halted: set[tuple[str, str]] = set()
        done: dict[tuple[str, int], int] = {}
        for partition, offset, event in batch:
            key = (event.tenant_id, event.run_id)
            done[(TOPIC, partition)] = offset + 1
            row = store.get(*key)
            if key in halted or (row is not None and row.halted):
                continue
            try:
                states[key] = apply_event(states.get(key) or (row.state if row else None), event)
            except ProjectionError as exc:
                halts.append(Halt.of(event, exc, topic=TOPIC, partition=partition, offset=offset))
                halted.add(key)
        store.apply_batch(
            ProjectionBatch(projections=list(states.values()), halts=halts, offsets=done)
        )


def _rebuild(store: SqliteProjectionStore, stream: list[tuple[int, Event]]) -> None:
    result = replay_runs(event for _, event in stream)
    halts = [Halt.of(result.halted_at[key], exc) for key, exc in result.halted.items()]
    store.apply_batch(ProjectionBatch(projections=list(result.projections.values()), halts=halts))


def test_rebuild_into_a_fresh_store_matches_the_online_projection(tmp_path: Path) -> None:
    stream = _stream()
    live = SqliteProjectionStore(tmp_path / "live.db")
    shadow = SqliteProjectionStore(tmp_path / "shadow.db")
    try:
        _online(live, stream, seed=1)
        _rebuild(shadow, stream)
        assert compare_projections(live, shadow) == []
        assert len(live.list()) == 6
        assert [r.run_id for r in live.list(halted=True)] == ["run-4"]
        assert sum(live.stored_offsets(TOPIC, range(3)).values()) == len(stream)
    finally:
        live.close()
        shadow.close()


def test_compare_reports_every_kind_of_difference(tmp_path: Path) -> None:
    a = SqliteProjectionStore(tmp_path / "a.db")
    b = SqliteProjectionStore(tmp_path / "b.db")
    try:
        a.apply_batch(
            ProjectionBatch(
                projections=[state_of("same"), state_of("moved", 10), state_of("only-a")]
            )
        )
        b.apply_batch(
            ProjectionBatch(
                projections=[state_of("same"), state_of("moved", 12), state_of("only-b", 3)],
                halts=[Halt("t1", "same", "bad", coords())],
            )
        )
        diffs = {d.run_id: d for d in compare_projections(a, b)}
        assert set(diffs) == {"same", "moved", "only-a", "only-b"}
        assert diffs["only-a"].kind == "only_in_a" and diffs["only-b"].kind == "only_in_b"
        assert diffs["same"].fields == ("haltReason", "halted")
        moved = diffs["moved"]
        assert moved.kind == "differs" and (moved.a_version, moved.b_version) == (10, 12)
        assert {"version", "lastEventId"} <= set(moved.fields)
        assert "moved: differs in" in moved.describe()
        assert compare_projections(a, a) == []
        assert [d.run_id for d in compare_projections(a, b, tenant="t9")] == []
    finally:
        a.close()
        b.close()
