"""Issue 12.5: the shadow comparison sees every column a reader is shown, and projection
snapshots are digest-verified like session snapshots. On SQLite and a real PostgreSQL; the
CLI runs replay over the real broker."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import (
    PROJECTOR_VERSION,
    Halt,
    ProjectionBatch,
    SnapshotMismatch,
    compare_projections,
    take_snapshot,
)
from runtrail.projection import replay as pure_replay
from tests.projection_support import full_run
from tests.projector_support import cli, forms, projection_at, sqlite_url
from tests.support import create_topic, produce_forms, unique_topic
from tests.test_projection_store import (  # noqa: F401  (fixtures)
    UrlFactory,
    coords,
    execute_raw,
    new_url,
    state_of,
)

#: Edits of the live store behind the projector's back, each only in a displayed column.
COLUMN_EDITS = {
    "status": "UPDATE projections SET status = 'failed'",
    "version": "UPDATE projections SET version = version + 1",
    "projectorVersion": "UPDATE projections SET projector_version = projector_version + 1",
    "haltReason": "UPDATE projections SET halt_reason = 'edited'",
}


@pytest.mark.parametrize("column", list(COLUMN_EDITS))
def test_compare_reports_an_edited_column(
    new_url: UrlFactory,  # noqa: F811
    column: str,
) -> None:
    live_url, shadow_url = new_url("live"), new_url("shadow")
    live, shadow = open_store(PROJECTIONS, live_url), open_store(PROJECTIONS, shadow_url)
    try:
        for store in (live, shadow):
            store.apply_batch(ProjectionBatch(projections=[state_of("run-a")]))
        assert compare_projections(live, shadow) == []
        execute_raw(live_url, COLUMN_EDITS[column])
        (difference,) = compare_projections(live, shadow)
        assert (difference.run_id, difference.kind, difference.fields) == (
            "run-a",
            "differs",
            (column,),
        )
    finally:
        live.close()
        shadow.close()


def test_compare_reports_an_edited_halt_position_in_the_same_topic(
    new_url: UrlFactory,  # noqa: F811
) -> None:
    live_url, shadow_url, moved_url = new_url("live"), new_url("shadow"), new_url("moved")
    stores = [open_store(PROJECTIONS, u) for u in (live_url, shadow_url, moved_url)]
    live, shadow, moved = stores
    try:
        for store in stores:
            store.apply_batch(ProjectionBatch(projections=[state_of("run-a", 3)]))
        halt = Halt("t1", "run-a", "bad", coords())
        live.apply_batch(ProjectionBatch(halts=[halt]))
        shadow.apply_batch(ProjectionBatch(halts=[halt]))
        other_topic = Halt("t1", "run-a", "bad", replace(coords(), topic="copy", offset=7))
        moved.apply_batch(ProjectionBatch(halts=[other_topic]))
        assert compare_projections(live, shadow) == []
        assert compare_projections(live, moved) == []  # a copy of the topic: other positions
        execute_raw(live_url, "UPDATE projections SET halt_offset = halt_offset + 1")
        assert [d.fields for d in compare_projections(live, shadow)] == [("haltedAt",)]
    finally:
        for store in stores:
            store.close()


def test_an_edited_snapshot_is_refused_with_its_reason(
    new_url: UrlFactory,  # noqa: F811
) -> None:
    url = new_url("snaps")
    store = open_store(PROJECTIONS, url)
    try:
        snapshot = take_snapshot(state_of("run-a", 10))
        store.save_snapshot(snapshot)
        assert store.load_snapshot("t1", "run-a") == snapshot
        # the state edited, the projector version and sequence columns left as they were
        execute_raw(
            url,
            "UPDATE projection_snapshots SET state = "
            "replace(state, '\"modelOperations\":', '\"modelOperations\":9')",
        )
        with pytest.raises(SnapshotMismatch, match="digest mismatch"):
            store.load_snapshot("t1", "run-a")
        store.save_snapshot(snapshot)
        execute_raw(url, "UPDATE projection_snapshots SET last_applied_sequence = 9")
        with pytest.raises(SnapshotMismatch, match="digest mismatch"):
            store.load_snapshot("t1", "run-a")
    finally:
        store.close()


# --- through the CLI, over the real broker ----------------------------------------------------
@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("proj-trust"), partitions=2)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=1)
    return name


def replay_into(bootstrap: str, topic: str, into: str, *extra: str) -> tuple[int, str, str]:
    return cli(
        "replay",
        "projection",
        "--into",
        into,
        "--bootstrap-servers",
        bootstrap,
        "--events-topic",
        topic,
        "--quiet",
        *extra,
    )


@pytest.mark.kafka
def test_replay_compare_reports_a_status_column_edited_in_the_live_store(
    kafka_bootstrap: str,
    topic: str,
    new_url: UrlFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    produce_forms(kafka_bootstrap, topic, forms(full_run("run-a")))
    live = new_url("live")
    assert replay_into(kafka_bootstrap, topic, live)[0] == 0
    status, out, err = replay_into(
        kafka_bootstrap, topic, sqlite_url(tmp_path / "a.db"), "--compare-with", live
    )
    assert status == 0 and "no difference" in out, out + err
    execute_raw(live, "UPDATE projections SET status = 'failed'")
    status, out, err = replay_into(
        kafka_bootstrap, topic, sqlite_url(tmp_path / "b.db"), "--compare-with", live
    )
    assert status == 1, out + err
    assert "t1/run-a: differs in status " in out
    assert cli("projection", "list", "--store", live, "--status", "failed")[1].startswith(
        "t1\trun-a\tfailed"
    )


@pytest.mark.kafka
def test_replay_refuses_an_edited_snapshot_and_says_it_replayed_from_zero(
    kafka_bootstrap: str,
    topic: str,
    new_url: UrlFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    run = full_run("run-a")
    produce_forms(kafka_bootstrap, topic, forms(run))
    truth = pure_replay(run.events)
    snaps = new_url("snaps")
    store = open_store(PROJECTIONS, snaps)
    store.save_snapshot(take_snapshot(pure_replay(run.events[:10])))
    store.close()
    status, out, err = replay_into(
        kafka_bootstrap, topic, sqlite_url(tmp_path / "trusted.db"), "--snapshots", snaps
    )
    assert status == 0 and "snapshot refused" not in out, out + err
    # the same projector version and sequence, an edited state: a cache that lies
    execute_raw(
        snaps,
        "UPDATE projection_snapshots SET state = "
        "replace(state, '\"modelOperations\":', '\"modelOperations\":9')",
    )
    into = tmp_path / "refused.db"
    status, out, err = replay_into(kafka_bootstrap, topic, sqlite_url(into), "--snapshots", snaps)
    assert status == 0, out + err
    assert "snapshots not trusted (runs rebuilt from events): 1" in out
    assert "t1/run-a: snapshot refused (" in out and "digest mismatch" in out
    assert "replayed from zero instead" in out
    with projection_at(into) as store:
        row = store.get("t1", "run-a")
    assert row is not None and row.state == truth  # the edit did not reach the rebuild
    assert row.projector_version == PROJECTOR_VERSION
