"""The projection store contract on both adapters — SQLite and a real PostgreSQL server: atomic
batches, fences (also between two writers at once), halts, offsets, snapshots, URLs — and the
shadow rebuild: a fresh store rebuilt from the events matches the online one."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.events import Event
from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import (
    PROJECTOR_VERSION,
    EventCoordinates,
    Halt,
    ProjectionBatch,
    ProjectionError,
    ProjectionSnapshot,
    ProjectionStore,
    RunProjection,
    SnapshotMismatch,
    StoreConflict,
    apply_event,
    compare_projections,
    replay,
    replay_runs,
    take_snapshot,
)
from runtrail.projection.store_postgres import PostgresProjectionStore
from runtrail.projection.store_sql import BatchWriter
from runtrail.projection.store_sqlite import path_of
from tests.projection_support import full_run

TOPIC = "runtrail.events"

#: name -> a fresh, empty store URL of the test's backend (the same name: the same store).
UrlFactory = Callable[[str], str]


@pytest.fixture(params=["sqlite", "postgres"])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[UrlFactory]:
    """Store URLs on SQLite files, or on fresh databases of the real PostgreSQL server."""
    made: dict[str, str] = {}
    if request.param == "sqlite":

        def sqlite_url(name: str) -> str:
            return made.setdefault(name, f"sqlite:///{tmp_path}/{name}.db")

        yield sqlite_url
        return
    import psycopg

    server = str(request.getfixturevalue("postgres_server"))
    base = server.rpartition("/")[0]

    def postgres_url(name: str) -> str:
        if name not in made:
            database = f"rt_{uuid.uuid4().hex[:12]}"
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{database}"')
            made[name] = f"{base}/{database}"
        return made[name]

    try:
        yield postgres_url
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            for url in made.values():
                database = url.rpartition("/")[2]
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.fixture
def store_url(new_url: UrlFactory) -> str:
    return new_url("projection")


@pytest.fixture
def store(store_url: str) -> Iterator[ProjectionStore]:
    s = open_store(PROJECTIONS, store_url)
    yield s
    s.close()


def execute_raw(url: str, statement: str) -> None:
    """Run one statement on the store's database behind its back."""
    if url.startswith("sqlite:"):
        db = sqlite3.connect(path_of(url))
        db.execute(statement)
        db.commit()
        db.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


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


def offsets(store: ProjectionStore) -> dict[int, int]:
    return store.stored_offsets(TOPIC, range(8))


# --- batches ----------------------------------------------------------------------------------
def test_batch_writes_projections_and_offsets(store: ProjectionStore) -> None:
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
    store: ProjectionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 3)], offsets={(TOPIC, 0): 3}))
    calls = 0
    real = BatchWriter.projection

    def failing(self: Any, cur: Any, state: RunProjection) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk full")
        real(self, cur, state)

    monkeypatch.setattr(BatchWriter, "projection", failing)
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
    monkeypatch.setattr(BatchWriter, "projection", real)
    store.apply_batch(batch)  # the same batch, retried, goes through whole
    assert offsets(store) == {0: 99, 1: 5}
    assert [r.run_id for r in store.list()] == ["run-a", "run-b", "run-c", "run-d"]


def test_batch_is_atomic_when_an_offset_would_move_back(store: ProjectionStore) -> None:
    store.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 50}))
    with pytest.raises(StoreConflict, match="refusing to move it back to 40"):
        store.apply_batch(
            ProjectionBatch(
                projections=[state_of("run-a")], offsets={(TOPIC, 1): 9, (TOPIC, 0): 40}
            )
        )
    assert store.list() == []
    assert offsets(store) == {0: 50}


def test_projection_never_moves_to_a_lower_version(store: ProjectionStore) -> None:
    store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 10)]))
    store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 10)]))  # same: idempotent
    with pytest.raises(StoreConflict, match="at version 10; refusing to write version 4"):
        store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 4)]))
    row = store.get("t1", "run-a")
    assert row is not None and row.version == 10


# --- halts ---------------------------------------------------------------------------------------
def test_halt_is_visible_and_fences_the_run(store: ProjectionStore) -> None:
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


def test_halt_of_a_run_never_projected(store: ProjectionStore) -> None:
    store.halt("t2", "run-x", "a run's first event must be run.accepted", coords(1, offset=None))
    row = store.get("t2", "run-x")
    assert row is not None
    assert (row.halted, row.state, row.status, row.version) == (True, None, None, 0)
    assert row.halt_coordinates is not None and row.halt_coordinates.offset is None


def test_list_filters(store: ProjectionStore) -> None:
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


def test_keyset_pages_cover_a_tenant_once_in_order(store: ProjectionStore) -> None:
    """``after`` pages through one tenant's runs (the explorer's list): every run once, in
    the store's order, whatever the page size; a status filter pages the same way."""
    names = ["run-A", "run-a", "run-b", "run-b2", "run-c", "run-z", "run-é"]
    store.apply_batch(
        ProjectionBatch(
            projections=[state_of(n) for n in names] + [state_of("run-x", tenant="t2")],
            halts=[Halt("t1", "run-halted", "bad", coords())],
        )
    )
    everything = [r.run_id for r in store.list(tenant="t1")]
    for size in (1, 2, 3, 10):
        seen: list[str] = []
        after: str | None = None
        while True:
            page = store.list(tenant="t1", limit=size, after=after)
            seen += [r.run_id for r in page]
            if len(page) < size:
                break
            after = page[-1].run_id
        assert seen == everything
    done = store.list(status="succeeded", tenant="t1", limit=2, after="run-b")
    assert [r.run_id for r in done] == ["run-b2", "run-c"]
    assert [r.run_id for r in store.list(tenant="t1", halted=True, after="run-a")] == ["run-halted"]
    with pytest.raises(ValueError, match="needs a tenant"):
        store.list(after="run-a")


# --- snapshots -----------------------------------------------------------------------------------
def test_snapshot_round_trip(store: ProjectionStore) -> None:
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


def test_snapshot_of_another_projector_version_is_not_trusted(store: ProjectionStore) -> None:
    state = state_of("run-a", 12)
    store.save_snapshot(
        ProjectionSnapshot(
            projector_version=PROJECTOR_VERSION + 1, last_applied_sequence=12, state=state
        )
    )
    with pytest.raises(SnapshotMismatch, match="rebuild from events"):
        store.load_snapshot("t1", "run-a")


def test_unreadable_snapshot_is_not_trusted(store: ProjectionStore, store_url: str) -> None:
    store.save_snapshot(take_snapshot(state_of("run-a", 3)))
    execute_raw(store_url, 'UPDATE projection_snapshots SET state = \'{"status": "weird"}\'')
    with pytest.raises(SnapshotMismatch, match="no digest"):
        store.load_snapshot("t1", "run-a")


# --- durability and URLs -------------------------------------------------------------------------
def test_everything_survives_a_reopen(new_url: UrlFactory) -> None:
    url = new_url("nested/dir/p")
    first = open_store(PROJECTIONS, url)
    first.apply_batch(
        ProjectionBatch(
            projections=[state_of("run-a")],
            halts=[Halt("t1", "run-b", "bad", coords())],
            snapshots=[take_snapshot(state_of("run-a", 4))],
            offsets={(TOPIC, 2): 17},
        )
    )
    first.close()
    again = open_store(PROJECTIONS, url)
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
    assert path_of("sqlite://" + rest) == path


def test_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = open_store(PROJECTIONS, "sqlite:///state/p.db")
    s.close()
    assert (tmp_path / "state" / "p.db").exists()


def test_memory_store_works() -> None:
    s = open_store(PROJECTIONS, "sqlite:///:memory:")
    s.apply_batch(ProjectionBatch(projections=[state_of("run-a")]))
    assert len(s.list()) == 1
    s.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://db/x", "unsupported"),
        ("p.db", "not a store URL"),
        ("sqlite://host/p.db", "no host"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(PROJECTIONS, url)


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


def _online(store: ProjectionStore, stream: list[tuple[int, Event]], seed: int) -> None:
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


def _rebuild(store: ProjectionStore, stream: list[tuple[int, Event]]) -> None:
    result = replay_runs(event for _, event in stream)
    halts = [Halt.of(result.halted_at[key], exc) for key, exc in result.halted.items()]
    store.apply_batch(ProjectionBatch(projections=list(result.projections.values()), halts=halts))


def test_rebuild_into_a_fresh_store_matches_the_online_projection(new_url: UrlFactory) -> None:
    stream = _stream()
    live = open_store(PROJECTIONS, new_url("live"))
    shadow = open_store(PROJECTIONS, new_url("shadow"))
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


def test_compare_reports_every_kind_of_difference(new_url: UrlFactory) -> None:
    a = open_store(PROJECTIONS, new_url("a"))
    b = open_store(PROJECTIONS, new_url("b"))
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
        assert diffs["same"].fields == ("haltReason", "halted", "haltedAt")
        moved = diffs["moved"]
        assert moved.kind == "differs" and (moved.a_version, moved.b_version) == (10, 12)
        assert {"version", "lastEventId"} <= set(moved.fields)
        assert "moved: differs in" in moved.describe()
        assert compare_projections(a, a) == []
        assert [d.run_id for d in compare_projections(a, b, tenant="t9")] == []
    finally:
        a.close()
        b.close()


# --- two writers at once -----------------------------------------------------------------------
def test_two_writers_cannot_both_move_a_run_or_an_offset_backwards(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores (two connections) write the same run and partition. The first holds its
    transaction open after its writes; the second's older batch waits for it, then is refused
    whole — never interleaved, never a regression; a newer batch afterwards goes through."""
    first = open_store(PROJECTIONS, store_url)
    second = open_store(PROJECTIONS, store_url)
    try:
        first.apply_batch(
            ProjectionBatch(projections=[state_of("run-a", 3)], offsets={(TOPIC, 0): 3})
        )
        wrote, release = threading.Event(), threading.Event()
        writer = first._writer  # type: ignore[attr-defined]
        real = writer.offset

        def held(cur: Any, topic: str, partition: int, offset: int) -> None:
            real(cur, topic, partition, offset)
            wrote.set()
            assert release.wait(10)

        monkeypatch.setattr(writer, "offset", held)
        newer = ProjectionBatch(projections=[state_of("run-a", 10)], offsets={(TOPIC, 0): 50})
        older = ProjectionBatch(
            projections=[state_of("run-a", 8), state_of("run-b")], offsets={(TOPIC, 0): 40}
        )
        outcome: dict[str, BaseException | None] = {}

        def write(name: str, store: ProjectionStore, batch: ProjectionBatch) -> None:
            try:
                store.apply_batch(batch)
                outcome[name] = None
            except BaseException as exc:
                outcome[name] = exc

        t1 = threading.Thread(target=write, args=("first", first, newer))
        t1.start()
        assert wrote.wait(10)  # the first batch has written, and not committed
        t2 = threading.Thread(target=write, args=("second", second, older))
        t2.start()
        time.sleep(0.3)
        assert "second" not in outcome  # the second writer waits for the first
        release.set()
        t1.join(15)
        t2.join(15)
        assert outcome["first"] is None
        assert isinstance(outcome["second"], StoreConflict)
        for reader in (first, second):
            row = reader.get("t1", "run-a")
            assert row is not None and row.version == 10 and row.state == state_of("run-a", 10)
            assert reader.get("t1", "run-b") is None  # the refused batch left nothing behind
            assert offsets(reader) == {0: 50}
        monkeypatch.undo()
        second.apply_batch(
            ProjectionBatch(projections=[state_of("run-a", 12)], offsets={(TOPIC, 0): 60})
        )
        with pytest.raises(StoreConflict):
            first.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 55}))
        assert offsets(first) == {0: 60}
    finally:
        first.close()
        second.close()


def test_racing_writers_keep_the_newest(new_url: UrlFactory) -> None:
    """Many rounds of two writers racing on one run and partition (and on a second run, in the
    opposite order, which must not deadlock): whatever commits first, the newest write stays."""
    url = new_url("race")
    stores = [open_store(PROJECTIONS, url), open_store(PROJECTIONS, url)]
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []
    try:
        for rnd in range(1, 6):  # full_run has 27 events: versions up to 21

            def write(i: int, rnd: int = rnd) -> None:
                version = 4 * rnd + i  # store 1 is always the newer of the round
                runs = [state_of("run-a", version), state_of("run-b", version)]
                batch = ProjectionBatch(
                    projections=runs if i else runs[::-1],
                    offsets={(TOPIC, 0): 100 * rnd + i, (TOPIC, 1): 100 * rnd + i},
                )
                barrier.wait(10)
                try:
                    stores[i].apply_batch(batch)
                except StoreConflict as exc:
                    if i == 1:  # the newer write of the round is never refused
                        failures.append(exc)
                except BaseException as exc:
                    failures.append(exc)

            threads = [threading.Thread(target=write, args=(i,)) for i in (0, 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(20)
            assert failures == []
            for run in ("run-a", "run-b"):
                row = stores[0].get("t1", run)
                assert row is not None and row.version == 4 * rnd + 1
            assert stores[1].stored_offsets(TOPIC, [0, 1]) == {0: 100 * rnd + 1, 1: 100 * rnd + 1}
    finally:
        for s in stores:
            s.close()


# --- PostgreSQL specifics ------------------------------------------------------------------------
@pytest.fixture
def locale_sorted_postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database whose default collation sorts like a human (ICU en-US: "run-1" <
    "run-a" < "Run-B"), where the server supports ICU; else a plain one."""
    import psycopg

    database = f"rt_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        try:
            admin.execute(
                f'CREATE DATABASE "{database}" TEMPLATE template0 '
                "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            )
        except psycopg.Error:
            admin.execute(f'CREATE DATABASE "{database}"')
    try:
        yield f"{postgres_server.rpartition('/')[0]}/{database}"
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def test_postgres_returns_exactly_what_sqlite_returns(
    tmp_path: Path, locale_sorted_postgres_url: str
) -> None:
    """The same writes into SQLite and PostgreSQL read back equal: every row (state, halts and
    their coordinates), the list order (bytewise, whatever the database's collation), offsets
    and snapshots; ``postgres://`` opens the PostgreSQL store too."""
    lite = open_store(PROJECTIONS, f"sqlite:///{tmp_path}/p.db")
    pg = open_store(
        PROJECTIONS, locale_sorted_postgres_url.replace("postgresql://", "postgres://", 1)
    )
    assert isinstance(pg, PostgresProjectionStore)
    try:
        stream = _stream()
        extra = ProjectionBatch(
            projections=[state_of("Run-B"), state_of("run-a", 4, tenant="T"), state_of("é", 2)],
            halts=[
                Halt("t1", "run-z", "bad", coords(offset=None)),
                Halt("t1", "run-1", "x", coords()),
            ],
            snapshots=[take_snapshot(state_of("run-a", 7))],
            offsets={(TOPIC, 5): 9},
        )
        for s in (lite, pg):
            _online(s, stream, seed=3)
            s.apply_batch(extra)
        assert pg.list() == lite.list() and len(lite.list()) == 10
        assert [r.run_id for r in pg.list(tenant="t1")][:2] == ["Run-B", "run-1"]
        for filters in ({"halted": True}, {"status": "succeeded", "tenant": "t0"}, {"limit": 3}):
            assert pg.list(**filters) == lite.list(**filters)
        for row in lite.list():
            assert pg.get(row.tenant_id, row.run_id) == row
        assert pg.stored_offsets(TOPIC, range(8)) == lite.stored_offsets(TOPIC, range(8))
        assert pg.load_snapshot("t1", "run-a") == lite.load_snapshot("t1", "run-a")
        assert compare_projections(lite, pg) == []
    finally:
        lite.close()
        pg.close()
