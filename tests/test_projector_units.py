"""The projector service's own logic without a broker: offsets held for dead letters, lost
partitions, fences, where runs start (rows, snapshots), settings and the CLI's ``replay`` group.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events import Event
from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import (
    PROJECTOR_VERSION,
    ProjectionBatch,
    ProjectionSnapshot,
    StoreConflict,
    replay,
    take_snapshot,
)
from runtrail.runtime import Delivered, ServiceContext
from runtrail_services.projector.folder import Outcome, RunFolder
from runtrail_services.projector.service import ProjectorService
from runtrail_services.projector.settings import ProjectorSettings
from tests.checkpoint_support import assign
from tests.projection_support import Run, full_run

TOPIC = "events"


def _delivered(events: Sequence[Event], start: int = 0, partition: int = 0) -> list[Delivered]:
    return [
        Delivered(e, e.json_form(), TOPIC, partition, start + i, 0, e.run_id.encode())
        for i, e in enumerate(events)
    ]


class Harness:
    """A ProjectorService on a SQLite file, with dead letters recorded instead of sent."""

    def __init__(self, db: Path, **options: str) -> None:
        self.dead: list[tuple[int, str, str]] = []
        context = ServiceContext(
            settings=Settings(),
            options={"store_url": f"sqlite:///{db}", **options},
            dead_letter=lambda d, reason, detail: self.dead.append((d.offset, reason, detail)),
        )
        self.service = ProjectorService(context)
        self.start = assign(self.service, [(TOPIC, 0)])

    def offsets(self) -> dict[int, int]:
        return self.service.store.stored_offsets(TOPIC, [0])


def _halting_partition() -> tuple[list[Event], Run]:
    """Offsets 0..5: a good run, and a run halted at offset 3 (its offset-5 event waits)."""
    good, bad = Run("good"), Run("bad")
    good.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    bad.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    good.add("run.input_required", {"requestId": "q"})
    bad.add("run.input_received", {"requestId": "nothing-asked"})  # invalid
    good.add("run.input_received", {"requestId": "q"})
    bad.add("run.succeeded", {"resultRef": "r"})
    order = [good.events[0], bad.events[0], good.events[1], bad.events[1], good.events[2]]
    return [*order, bad.events[2]], good


def test_offsets_wait_one_flush_for_dead_letters_then_move_on(tmp_path: Path) -> None:
    events, good = _halting_partition()
    h = Harness(tmp_path / "p.db")
    assert h.start == {(TOPIC, 0): -2}  # a store that never saw the partition: the beginning
    h.service.process(_delivered(events))
    assert [(o, r) for o, r, _ in h.dead] == [(3, "invalid-transition")]
    h.service.flush()
    assert h.offsets() == {0: 3}  # held at the dead letter until the runtime flushed it
    row = h.service.store.get("t1", "bad")
    assert row is not None and row.halted  # the halt itself is durable already
    h.service.flush()  # the runtime flushed the dead letters after the previous flush
    assert h.offsets() == {0: 6}
    assert h.service.store.get("t1", "good").state == replay(good.events)  # type: ignore[union-attr]


def test_a_crash_before_the_dead_letter_was_flushed_sends_it_again(tmp_path: Path) -> None:
    events, _ = _halting_partition()
    h = Harness(tmp_path / "p.db")
    h.service.process(_delivered(events))
    h.service.flush()  # ... and the process dies before the runtime flushed the dead letters
    h.service.close()
    again = Harness(tmp_path / "p.db")
    assert again.start == {(TOPIC, 0): 3}
    again.service.process(_delivered(events[3:], start=3))
    assert [(o, r) for o, r, _ in again.dead] == [(3, "invalid-transition")]  # once more
    again.service.flush()
    again.service.flush()
    assert again.offsets() == {0: 6}
    assert again.service.metrics.halted_runs._value.get() == 1  # the same halted run


def test_positions_of_messages_the_runtime_dropped_are_stored(tmp_path: Path) -> None:
    events, _ = _halting_partition()
    h = Harness(tmp_path / "p.db")
    h.service.process(_delivered(events[:2]))
    h.service.context.checkpoint.reached(
        {(TOPIC, 0): 9}
    )  # offsets 2..8 were duplicates or dead letters
    h.service.flush()
    assert h.offsets() == {0: 9}


def test_a_lost_partition_drops_what_was_not_written(tmp_path: Path) -> None:
    events, _ = _halting_partition()
    h = Harness(tmp_path / "p.db")
    h.service.process(_delivered(events))
    h.service.on_revoked([(TOPIC, 0)])  # lost: no flush came first
    h.service.flush()
    assert h.offsets() == {}
    assert h.service.store.list() == []


def test_a_stale_consumer_is_refused_by_the_fences(tmp_path: Path) -> None:
    events, _ = _halting_partition()
    ahead, stale = Harness(tmp_path / "p.db"), Harness(tmp_path / "p.db")
    ahead.service.process(_delivered(events))
    ahead.service.flush()
    stale.service.process(_delivered(events[:2]))
    with pytest.raises(StoreConflict):
        stale.service.flush()
    assert stale.service.metrics.conflicts._value.get() == 1
    assert ahead.offsets() == {0: 3}


def test_snapshots_are_written_each_time_a_run_crosses_a_multiple(tmp_path: Path) -> None:
    run = full_run()
    h = Harness(tmp_path / "p.db", snapshot_every="10")
    h.service.process(_delivered(run.events[:25]))
    h.service.flush()
    snapshot = h.service.store.load_snapshot("t1", "run-1")
    assert snapshot is not None and snapshot.last_applied_sequence == 20
    assert snapshot.state == replay(run.events[:20])
    assert h.service.metrics.snapshots._value.get() == 1  # the latest per run and flush
    h.service.process(_delivered(run.events[25:], start=25))
    h.service.flush()
    assert h.service.metrics.snapshots._value.get() == 1  # 26, 27: no multiple of 10 crossed


# --- where a run starts --------------------------------------------------------------------------
def _store(tmp_path: Path, name: str) -> Any:
    return open_store(PROJECTIONS, f"sqlite:///{tmp_path / name}")


def _fold(folder: RunFolder, events: Sequence[Event], start: int = 0) -> list[Outcome]:
    return [folder.apply(e, start + i).outcome for i, e in enumerate(events)]


def test_a_gap_halts_the_run_unless_gaps_are_recorded(tmp_path: Path) -> None:
    run = full_run()
    holed = [*run.events[:4], *run.events[5:8]]
    strict = RunFolder(_store(tmp_path, "a.db"), TOPIC, 0)
    assert _fold(strict, holed)[4] is Outcome.HALTED
    assert strict.pending.halts[0].reason.startswith("missing-events: ")
    assert "event 5 of this run never arrived" in strict.pending.halts[0].reason
    lenient = RunFolder(_store(tmp_path, "b.db"), TOPIC, 0, halt_on_gap=False)
    assert set(_fold(lenient, holed)) == {Outcome.APPLIED}
    gaps = lenient.pending.projections[("t1", "run-1")].gaps
    assert [(g.first, g.last) for g in gaps] == [(5, 5)]


def test_a_trusted_snapshot_must_be_followed_by_the_next_sequence(tmp_path: Path) -> None:
    run = full_run()
    snapshots = _store(tmp_path, "snaps.db")
    snapshots.save_snapshot(take_snapshot(replay(run.events[:10])))
    folder = RunFolder(_store(tmp_path, "a.db"), TOPIC, 0, snapshots=snapshots)
    outcomes = _fold(folder, run.events[12:14])
    assert outcomes == [Outcome.HALTED, Outcome.SKIPPED]
    reason = folder.pending.halts[0].reason
    assert reason.startswith("snapshot-mismatch: ") and "events 11..12 were not read" in reason


def test_an_untrusted_snapshot_is_refused_and_the_run_rebuilt(tmp_path: Path) -> None:
    run = full_run()
    snapshots = _store(tmp_path, "snaps.db")
    wrong = replay(run.events[:10]).model_copy(update={"status": "cancelled"})
    snapshots.save_snapshot(
        ProjectionSnapshot(
            projector_version=PROJECTOR_VERSION + 1, last_applied_sequence=10, state=wrong
        )
    )
    folder = RunFolder(_store(tmp_path, "a.db"), TOPIC, 0, snapshots=snapshots)
    assert set(_fold(folder, run.events)) == {Outcome.APPLIED}
    assert folder.untrusted_snapshots == 1
    assert folder.pending.projections[("t1", "run-1")] == replay(run.events)


def test_evicted_runs_are_reloaded_from_the_store(tmp_path: Path) -> None:
    a, b = full_run("a"), full_run("b")
    store = _store(tmp_path, "a.db")
    folder = RunFolder(store, TOPIC, 0, cached_runs=1)
    _fold(folder, [a.events[0], b.events[0]])
    store.apply_batch(ProjectionBatch(projections=list(folder.pending.projections.values())))
    folder.committed()  # trims to one cached run: "a" is evicted
    assert _fold(folder, a.events[1:], start=2) == [Outcome.APPLIED] * (len(a.events) - 1)
    assert folder.pending.projections[("t1", "a")] == replay(a.events)


# --- settings and CLI plumbing -------------------------------------------------------------------
def test_settings_reject_unknown_options_and_default_the_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown projector option"):
        ProjectorSettings.load({"snapshot_evry": "3"})
    settings = ProjectorSettings.load({"snapshot_every": "3"})
    assert settings.snapshot_every == 3
    assert settings.resolved_store_url(tmp_path) == f"sqlite:///{tmp_path}/projection.db"


def test_the_replay_group_is_shared_whichever_module_registers_first() -> None:
    from runtrail_tools.cli import replay_projection_cmd as mine

    def plain(subparsers: Any) -> None:  # what capture_cmd does today: it creates the group
        replay = subparsers.add_parser("replay")
        sub = replay.add_subparsers(dest="replay_command", required=True)
        sub.add_parser("node").set_defaults(func="node")

    def reusing(subparsers: Any) -> None:  # a module registering after ours
        mine.replay_group(subparsers).add_parser("node").set_defaults(func="node")

    for order in ([plain, mine.register], [mine.register, reusing]):
        parser = argparse.ArgumentParser()
        subparsers = parser.add_subparsers(dest="command")
        for register in order:
            register(subparsers)
        assert parser.parse_args(["replay", "node"]).func == "node"
        args = parser.parse_args(["replay", "projection", "--into", "sqlite:///x.db"])
        assert args.func is mine.run_replay


def test_timestamps_for_the_replay() -> None:
    from runtrail_tools.cli.replay_projection_cmd import parse_timestamp

    assert parse_timestamp("1764410400000") == 1764410400000
    assert parse_timestamp("2025-11-29T10:00:00Z") == 1764410400000
    assert parse_timestamp("2025-11-29T10:00:00") == 1764410400000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_timestamp("yesterday")


def test_drafts_leave_snapshots_and_written_states_as_they_were(tmp_path: Path) -> None:
    """A folder with ``drafts`` (the replay's) updates its unwritten states in place, but never
    a state a snapshot holds or one already written; its results equal the copying folder's."""
    run = full_run()
    store, plain_store = _store(tmp_path, "a.db"), _store(tmp_path, "b.db")
    folder = RunFolder(store, TOPIC, 0, snapshot_every=4, drafts=True)
    plain = RunFolder(plain_store, TOPIC, 0, snapshot_every=4)
    assert set(_fold(folder, run.events[:10])) == {Outcome.APPLIED}
    _fold(plain, run.events[:10])
    snapshots = dict(folder.pending.snapshots)
    written = folder.pending.projections[("t1", "run-1")]
    store.apply_batch(ProjectionBatch(projections=[written], snapshots=list(snapshots.values())))
    folder.committed()
    assert set(_fold(folder, run.events[10:], start=10)) == {Outcome.APPLIED}
    _fold(plain, run.events[10:], start=10)
    assert written == replay(run.events[:10])
    assert snapshots[("t1", "run-1")].state == replay(run.events[:8])
    final = folder.pending.projections[("t1", "run-1")]
    assert final == plain.pending.projections[("t1", "run-1")] == replay(run.events)
    assert [s.state for s in folder.pending.snapshots.values()] == [
        s.state for s in plain.pending.snapshots.values()
    ]


def test_a_folder_on_an_empty_store_reads_only_runs_it_met(tmp_path: Path) -> None:
    """``met`` (the replay's, on a store checked empty): a run met for the first time is not
    looked up; one met before (written, then evicted from the cache) is read back."""
    a, b = full_run("a"), full_run("b")
    store = _store(tmp_path, "a.db")
    reads: list[tuple[str, str]] = []
    read = store.get

    def counted(tenant: str, run: str) -> Any:
        reads.append((tenant, run))
        return read(tenant, run)

    store.get = counted
    met: set[tuple[str, str]] = set()
    folder = RunFolder(store, TOPIC, 0, cached_runs=1, met=met)
    _fold(folder, [a.events[0], b.events[0]])
    assert reads == [] and met == {("t1", "a"), ("t1", "b")}
    store.apply_batch(ProjectionBatch(projections=list(folder.pending.projections.values())))
    folder.committed()  # "a" is evicted
    assert _fold(folder, a.events[1:], start=2) == [Outcome.APPLIED] * (len(a.events) - 1)
    assert reads == [("t1", "a")]
    assert folder.pending.projections[("t1", "a")] == replay(a.events)
