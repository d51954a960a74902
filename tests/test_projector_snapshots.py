"""Snapshots, over a real broker: replay from zero equals replay from each valid snapshot; an
untrusted snapshot (or row) is refused and its run rebuilt from events; a rebuild from a
timestamp needs snapshots covering what it did not read.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runtrail.projection import (
    PROJECTOR_VERSION,
    ProjectionSnapshot,
    take_snapshot,
)
from runtrail.projection import (
    replay as pure_replay,
)
from tests.projection_support import Run, full_run
from tests.projector_support import (
    Form,
    InProcessProjector,
    forms,
    interleave,
    projection_at,
    replay,
    sqlite_url,
    wait_caught_up,
)
from tests.support import create_topic, produce_forms, unique_topic

pytestmark = [pytest.mark.kafka]
PARTITIONS = 2


def _runs() -> list[Run]:
    cancelled = Run("cancelled")
    cancelled.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    cancelled.add("budget.reserved", {"budgetId": "usd", "amount": 5, "unit": "usd"})
    cancelled.add("run.approval_required", {"actionDigest": "d"}, version=1)
    cancelled.add("run.cancellation_requested", {})
    cancelled.add("run.cancellation_acknowledged", {"reason": "stop"})
    return [full_run("run-a"), full_run("run-b", "t2"), cancelled]


def _snapshot_store(db: Path, runs: list[Run], cut: int) -> Path:
    """Snapshots of every run after its first ``cut`` events (or all, if shorter)."""
    with projection_at(db) as store:
        for run in runs:
            store.save_snapshot(take_snapshot(pure_replay(run.events[:cut])))
    return db


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("proj-snap"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=1)
    return name


def test_replay_from_zero_equals_replay_from_each_valid_snapshot(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    runs = _runs()
    produce_forms(kafka_bootstrap, topic, interleave(*(forms(r) for r in runs)))
    zero = tmp_path / "zero.db"
    status, out, err = replay(kafka_bootstrap, topic, zero, "--quiet")
    assert status == 0, out + err
    with projection_at(zero) as store:
        for run in runs:
            row = store.get(run.tenant, run.run_id)
            assert row is not None and row.state == pure_replay(run.events)
    # snapshots the service writes (every 4 sequences) as the starting points
    live = tmp_path / "live.db"
    service = InProcessProjector(kafka_bootstrap, topic, live, snapshot_every="4")
    try:
        wait_caught_up(kafka_bootstrap, live, topic, PARTITIONS)
    finally:
        assert service.stop() == 0
    with projection_at(live) as store:
        snapshot = store.load_snapshot("t1", "run-a")
        assert snapshot is not None and snapshot.last_applied_sequence == 24  # 27 events
    starts = [sqlite_url(live)]
    # and a snapshot after each sequence a run goes through
    longest = max(len(r.events) for r in runs)
    for cut in range(1, longest + 1):
        starts.append(sqlite_url(_snapshot_store(tmp_path / f"cut-{cut}.db", runs, cut)))
    for i, start in enumerate(starts):
        status, out, err = replay(
            kafka_bootstrap,
            topic,
            tmp_path / f"from-{i}.db",
            "--quiet",
            "--snapshots",
            start,
            "--compare-with",
            sqlite_url(zero),
        )
        assert status == 0, f"from {start}: {out}{err}"
        assert "no difference" in out and "halted runs: 0" in out


def _doctored(run: Run, cut: int, projector_version: int) -> ProjectionSnapshot:
    """A snapshot whose state is wrong (99 model operations), stamped with a version."""
    state = pure_replay(run.events[:cut]).model_copy(update={"model_operations": 99})
    return ProjectionSnapshot(
        projector_version=projector_version, last_applied_sequence=cut, state=state
    )


def test_a_replay_starts_from_a_trusted_snapshot_and_refuses_an_untrusted_one(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """The doctored state shows whether the snapshot was used: a trusted one is (snapshots are
    caches, trusted by version), one of another projector version is not."""
    run = full_run("run-a")
    produce_forms(kafka_bootstrap, topic, forms(run))
    for version, used in [(PROJECTOR_VERSION, True), (PROJECTOR_VERSION + 1, False)]:
        snaps = tmp_path / f"snaps-v{version}.db"
        with projection_at(snaps) as store:
            store.save_snapshot(_doctored(run, 10, version))
        into = tmp_path / f"into-v{version}.db"
        status, out, err = replay(kafka_bootstrap, topic, into, "--snapshots", sqlite_url(snaps))
        assert status == 0, out + err
        with projection_at(into) as store:
            row = store.get("t1", "run-a")
        assert row is not None and row.state is not None
        truth = pure_replay(run.events)
        if used:  # the 99 carried on: the replay started from the snapshot's state
            assert row.state.model_operations == truth.model_operations + 99
            assert row.state.model_copy(update={"model_operations": 1}) == truth
        else:
            assert row.state == truth
            assert "snapshots not trusted (runs rebuilt from events): 1" in out


def _until(produced: list[Form], kafka_bootstrap: str, topic: str) -> int:
    """Produce, then a timestamp (ms) strictly after their log-append times."""
    produce_forms(kafka_bootstrap, topic, produced)
    time.sleep(1.1)
    marker = int(time.time() * 1000)
    time.sleep(1.1)
    return marker


def test_a_replay_from_a_timestamp_needs_snapshots_covering_what_it_skips(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    runs = _runs()
    late = Run("late")  # starts after the timestamp: needs no snapshot
    late.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    late.add("run.succeeded", {"resultRef": "r"})
    cut = {"run-a": 8, "run-b": 8, "cancelled": 3}
    head = interleave(*(forms(r)[: cut[r.run_id]] for r in runs))
    tail = interleave(*(forms(r)[cut[r.run_id] :] for r in runs), forms(late))
    marker = _until(head, kafka_bootstrap, topic)
    live = tmp_path / "live.db"
    service = InProcessProjector(kafka_bootstrap, topic, live, snapshot_every="1")
    try:
        wait_caught_up(kafka_bootstrap, live, topic, PARTITIONS)  # snapshots at the head's end
    finally:
        assert service.stop() == 0
    produce_forms(kafka_bootstrap, topic, tail)
    zero = tmp_path / "zero.db"
    assert replay(kafka_bootstrap, topic, zero, "--quiet")[0] == 0
    since = str(marker)
    status, out, err = replay(
        kafka_bootstrap,
        topic,
        tmp_path / "from-t.db",
        "--from-timestamp",
        since,
        "--snapshots",
        sqlite_url(live),
        "--compare-with",
        sqlite_url(zero),
    )
    assert status == 0, out + err
    assert f"replayed {len(tail)} events" in out
    # without snapshots, the runs that began before T halt instead of being guessed
    status, out, _ = replay(
        kafka_bootstrap, topic, tmp_path / "bare.db", "--from-timestamp", since, "--quiet"
    )
    assert status == 0
    assert "halted runs: 3" in out
    assert out.count("missing-events: ") == 3
    with projection_at(tmp_path / "bare.db") as store:
        late_row = store.get("t1", "late")
        assert late_row is not None and late_row.status == "succeeded"


def test_a_row_of_another_projector_version_halts_and_a_rebuild_replaces_the_store(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """New projector code over an old store: the run halts (visible) rather than continue from
    state it does not trust; a rebuild into a fresh store replaces it, and the service carries
    on from the offsets the rebuild stored."""
    runs = _runs()[:2]
    head = interleave(*(forms(r)[:10] for r in runs))
    produce_forms(kafka_bootstrap, topic, head)
    live = tmp_path / "live.db"
    service = InProcessProjector(kafka_bootstrap, topic, live)
    try:
        wait_caught_up(kafka_bootstrap, live, topic, PARTITIONS)
    finally:
        assert service.stop() == 0
    _stamp_old(live, "run-a")
    produce_forms(kafka_bootstrap, topic, interleave(*(forms(r)[10:20] for r in runs)))
    service = InProcessProjector(kafka_bootstrap, topic, live)
    try:
        wait_caught_up(kafka_bootstrap, live, topic, PARTITIONS)
    finally:
        assert service.stop() == 0
    with projection_at(live) as store:
        row = store.get("t1", "run-a")
        assert row is not None and row.halted and row.halt_reason is not None
        assert row.halt_reason.startswith("snapshot-mismatch: ")
        assert f"written by projector v0, this is v{PROJECTOR_VERSION}" in row.halt_reason
        other = store.get("t2", "run-b")
        assert other is not None and not other.halted and other.version == 20
    rebuilt = tmp_path / "rebuilt.db"
    status, out, _ = replay(
        kafka_bootstrap, topic, rebuilt, "--quiet", "--compare-with", sqlite_url(live)
    )
    assert status == 1
    [line] = [x for x in out.splitlines() if "t1/run-a" in x]
    assert "differs in haltReason, halted," in line
    # switch the service to the rebuilt store: it continues where the rebuild stopped
    rest = interleave(*(forms(r)[20:] for r in runs))
    produce_forms(kafka_bootstrap, topic, rest)
    service = InProcessProjector(kafka_bootstrap, topic, rebuilt)
    try:
        wait_caught_up(kafka_bootstrap, rebuilt, topic, PARTITIONS)
        applied = service.sample("runtrail_projection_events_total", outcome="applied")
    finally:
        assert service.stop() == 0
    assert applied == len(rest)  # nothing before the rebuild's offsets was read again
    with projection_at(rebuilt) as store:
        for run in runs:
            final = store.get(run.tenant, run.run_id)
            assert final is not None and final.state == pure_replay(run.events)


def _stamp_old(db: Path, run_id: str) -> None:
    """Pretend projector v0 wrote this run's row (as after a code upgrade)."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE projections SET projector_version = 0 WHERE run_id = ?", (run_id,))
