"""The rebuild folded by several processes (``replay projection --workers N``), over a real broker
and real stores: it builds exactly what one process builds (rows, halts, snapshots, offsets and
the summary); a run found in two partitions fails the replay, naming the run; a
worker that dies or raises fails the replay, and no worker outlives it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from runtrail.config import Settings
from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import (
    PROJECTOR_VERSION,
    ProjectionSnapshot,
    ProjectionStore,
    compare_projections,
)
from runtrail.projection import replay as pure_replay
from runtrail.projection.store_sqlite import SqliteProjectionStore
from runtrail_services.projector.partitioned_fold import RunInTwoPartitions
from runtrail_services.projector.rebuild import rebuild_projection
from runtrail_services.projector.rebuild_workers import ReplayWorkerFailed, plan
from runtrail_services.projector.replay_fold import Progress, ReplaySummary
from runtrail_services.projector.topic_reader import PartitionRange
from tests.projection_support import Run, full_run
from tests.projector_support import forms, projection_at, replay, sqlite_url
from tests.support import create_topic, encode, unique_topic

pytestmark = [pytest.mark.kafka]

#: runs go to partitions 0-3 (by run, as the publisher keys them); 4 holds only unreadable
#: messages; 5 stays empty
PARTITIONS = 6


def _produce(bootstrap: str, topic: str, items: Iterable[tuple[int, bytes]]) -> None:
    """(partition, value) pairs, in order, each to its partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, value in items:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def _halting(run_id: str) -> Run:
    r = Run(run_id)
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("run.succeeded", {"resultRef": "r"})
    r.add("TOOL_CALL", {"callId": "c", "toolName": "send_email"}, turn_id="t", step=1)
    r.add("TOOL_RESULT", {"callId": "c"}, turn_id="t", step=1)
    return r


def _gapped(run_id: str) -> list[Any]:
    """A run whose second event never arrives: it halts with missing-events."""
    events = forms(full_run(run_id, "t2"))
    return [events[0], *events[2:]]


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    """Runs in partitions 0-3 with halts, duplicates and unreadable messages between them."""
    name = create_topic(kafka_bootstrap, unique_topic("proj-workers"), partitions=PARTITIONS)
    items: list[tuple[int, bytes]] = []
    for i in range(24):
        partition = i % 4
        if i % 6 == 1:
            run = forms(_halting(f"halts-{i}"))
        elif i % 6 == 2:
            run = _gapped(f"gap-{i}")
        else:
            run = forms(full_run(f"run-{i}", f"t{i % 3}"))
        if i % 5 == 0:  # redelivered: every event twice, some later again
            run = [f for f in run for _ in range(2)] + run[:3]
        items += [(partition, encode(f)) for f in run]
        if partition in (1, 3):
            items.append((partition, b"\x00not an event"))
    spans = forms(full_run("spans"))  # begins before LATER[name], ends after it
    items += [(0, encode(f)) for f in spans[:10]]
    items += [(4, b"garbage"), (4, b"\x00\x01\x02")]
    _produce(kafka_bootstrap, name, items)
    time.sleep(0.05)
    LATER[name] = int(time.time() * 1000)
    time.sleep(0.05)
    # after it, partitions 0, 1 and 4 only: 2 and 3 hold events, none read from LATER
    later = [(0, encode(f)) for f in spans[10:]]
    later += [(1, encode(f)) for f in forms(full_run("late", "t1"))]
    _produce(kafka_bootstrap, name, [*later, (4, b"late garbage")])
    return name


#: a time between the topic's two bursts, by topic
LATER: dict[str, int] = {}


def _rebuild(bootstrap: str, topic: str, db: Path, workers: int, **kw: Any) -> ReplaySummary:
    store = open_store(PROJECTIONS, sqlite_url(db))
    try:
        settings = Settings(bootstrap_servers=bootstrap, events_topic=topic)
        return rebuild_projection(settings, store, snapshot_every=3, workers=workers, **kw)
    finally:
        store.close()


def _same_summary(a: ReplaySummary, b: ReplaySummary) -> None:
    def key(s: ReplaySummary) -> tuple[Any, ...]:
        return (
            s.events,
            s.applied,
            s.duplicates,
            s.skipped,
            s.runs,
            s.untrusted_snapshots,
            sorted(s.refused_snapshots),
            s.offsets,
            sorted((h.tenant_id, h.run_id, h.reason, h.coordinates) for h in s.halted),
            sorted((u.partition, u.offset, u.reason) for u in s.unreadable),
        )

    assert key(a) == key(b)


def _same_store(a: Path, b: Path, topic: str) -> None:
    with projection_at(a) as one, projection_at(b) as other:
        assert compare_projections(one, other) == []
        rows = one.list()
        assert rows == other.list()
        for row in rows:  # the snapshots, run by run
            assert one.load_snapshot(row.tenant_id, row.run_id) == other.load_snapshot(
                row.tenant_id, row.run_id
            )
        assert one.stored_offsets(topic, range(PARTITIONS)) == other.stored_offsets(
            topic, range(PARTITIONS)
        )


def test_workers_build_what_one_process_builds(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    one = _rebuild(kafka_bootstrap, topic, tmp_path / "one.db", 1)
    assert one.workers == 1
    assert one.halted and one.unreadable and one.duplicates and one.skipped  # it is all there
    progress: list[Progress] = []
    three = _rebuild(
        kafka_bootstrap,
        topic,
        tmp_path / "three.db",
        3,
        on_progress=progress.append,
        progress_interval_s=0.05,
    )
    assert three.workers == 3
    _same_summary(one, three)
    _same_store(tmp_path / "one.db", tmp_path / "three.db", topic)
    # every partition ends at its captured end, the empty one stays absent
    with projection_at(tmp_path / "three.db") as store:
        assert store.stored_offsets(topic, range(PARTITIONS)) == {
            r.partition: r.end for r in three.ranges if r.end > 0
        }
    assert 5 not in {p for p, o in three.offsets.items() if o > 0}
    # progress added up over the processes, ending with everything
    assert progress[-1].events == progress[-1].total == three.events
    assert progress[-1].runs == three.runs and progress[-1].halted == len(three.halted)
    # each run is what the pure fold of its events gives
    with projection_at(tmp_path / "three.db") as store:
        row = store.get("t0", "run-0")
        assert row is not None and row.state == pure_replay(full_run("run-0", "t0").events)


def test_workers_start_from_a_timestamp_as_one_process_does(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """Partitions with nothing after the timestamp still end at their captured end; the run
    that began before it halts (no snapshot) in both."""
    at = LATER[topic]
    one = _rebuild(kafka_bootstrap, topic, tmp_path / "one.db", 1, from_timestamp_ms=at)
    two = _rebuild(kafka_bootstrap, topic, tmp_path / "two.db", 2, from_timestamp_ms=at)
    assert two.workers == 2
    _same_summary(one, two)
    _same_store(tmp_path / "one.db", tmp_path / "two.db", topic)
    assert [h.run_id for h in two.halted] == ["spans"]
    assert {r.partition for r in two.ranges if r.size == 0 and r.end > 0} >= {2, 3}
    with projection_at(tmp_path / "two.db") as store:
        offsets = store.stored_offsets(topic, range(PARTITIONS))
    assert offsets == {r.partition: r.end for r in two.ranges if r.end > 0}


def test_workers_start_from_snapshots_and_refuse_untrusted_ones_as_one_process_does(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    snaps = tmp_path / "snaps.db"
    with projection_at(snaps) as store:
        for i, version in [(0, PROJECTOR_VERSION), (3, PROJECTOR_VERSION + 1)]:
            run = full_run(f"run-{i}", f"t{i % 3}")
            state = pure_replay(run.events[:8])
            store.save_snapshot(
                ProjectionSnapshot(projector_version=version, last_applied_sequence=8, state=state)
            )
    summaries = []
    for workers in (1, 2):
        source = open_store(PROJECTIONS, sqlite_url(snaps))
        try:
            summaries.append(
                _rebuild(
                    kafka_bootstrap, topic, tmp_path / f"{workers}.db", workers, snapshots=source
                )
            )
        finally:
            source.close()
    one, two = summaries
    assert two.workers == 2
    assert one.untrusted_snapshots == 1 and [r[1] for r in one.refused_snapshots] == ["run-3"]
    _same_summary(one, two)
    _same_store(tmp_path / "1.db", tmp_path / "2.db", topic)


def test_workers_rebuild_into_postgresql_what_one_process_builds_in_sqlite(
    kafka_bootstrap: str, topic: str, tmp_path: Path, postgres_url: str
) -> None:
    """Each worker opens the PostgreSQL store again by its URL and writes its own batches."""
    one = _rebuild(kafka_bootstrap, topic, tmp_path / "one.db", 1)
    into = open_store(PROJECTIONS, postgres_url)
    try:
        settings = Settings(bootstrap_servers=kafka_bootstrap, events_topic=topic)
        three = rebuild_projection(settings, into, snapshot_every=3, workers=3)
        assert three.workers == 3
        _same_summary(one, three)
        with projection_at(tmp_path / "one.db") as sqlite:
            assert compare_projections(sqlite, into) == []
            assert sqlite.list() == into.list()
            for row in sqlite.list():
                assert sqlite.load_snapshot(row.tenant_id, row.run_id) == into.load_snapshot(
                    row.tenant_id, row.run_id
                )
            partitions = range(PARTITIONS)
            assert sqlite.stored_offsets(topic, partitions) == into.stored_offsets(
                topic, partitions
            )
    finally:
        into.close()


def test_the_cli_folds_with_workers(kafka_bootstrap: str, topic: str, tmp_path: Path) -> None:
    status, out, err = replay(
        kafka_bootstrap, topic, tmp_path / "a.db", "--quiet", "--workers", "1"
    )
    assert status == 0, out + err
    assert "(6 partitions, 1 worker)" in out
    status, out, err = replay(
        kafka_bootstrap,
        topic,
        tmp_path / "b.db",
        "--workers",
        "2",
        "--compare-with",
        sqlite_url(tmp_path / "a.db"),
    )
    assert status == 0, out + err
    assert "(6 partitions, 2 workers)" in out and "no difference" in out
    assert "events/s" in err
    with pytest.raises(SystemExit) as usage:  # argparse refuses it
        replay(kafka_bootstrap, topic, tmp_path / "c.db", "--workers", "0")
    assert usage.value.code == 2


def test_a_run_in_partitions_of_two_workers_fails_the_replay(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Produced with two keys, one run's events sit in two partitions: no fold can order
    them, so the replay fails naming the run and its two partitions, whether two processes
    met it or one (one process folds each partition on its own too: it used to end with a row
    both succeeded and halted, exit 0)."""
    name = create_topic(kafka_bootstrap, unique_topic("proj-split"), partitions=2)
    split = forms(full_run("split"))
    other = forms(full_run("alone"))
    _produce(
        kafka_bootstrap,
        name,
        [(0, encode(f)) for f in split[:10]]
        + [(1, encode(f)) for f in split[10:]]
        + [(1, encode(f)) for f in other],
    )
    for count in (2, 1):
        with pytest.raises(RunInTwoPartitions, match=r"run t1/split has events in partitions "):
            _rebuild(kafka_bootstrap, name, tmp_path / f"two-{count}.db", count)
    assert multiprocessing.active_children() == []
    for workers in ("2", "1"):  # the CLI says so, and that no --workers rebuilds it
        status, out, err = replay(
            kafka_bootstrap, name, tmp_path / f"cli-{workers}.db", "--workers", workers
        )
        assert status == 2 and "run t1/split has events in partitions [0, 1]" in err, out + err
        assert "cannot be rebuilt from this topic" in err and "--workers 1" not in err


@contextlib.contextmanager
def _as_soon_as_a_worker_runs(act: Callable[[int], None]) -> Iterator[list[int]]:
    """Call ``act(pid)`` (from a thread) once a worker process is running: long before it
    could have folded anything (it needs a good half second to start)."""
    acted: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                children = multiprocessing.active_children()
            except RuntimeError:  # the set of children changed under it (the main thread)
                continue
            if children and children[0].pid:
                act(children[0].pid)
                acted.append(children[0].pid)
                return
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield acted
    finally:
        done.set()
        watcher.join(5)


def test_a_worker_killed_fails_the_replay(kafka_bootstrap: str, topic: str, tmp_path: Path) -> None:
    with (
        _as_soon_as_a_worker_runs(lambda pid: os.kill(pid, signal.SIGKILL)) as killed,
        pytest.raises(ReplayWorkerFailed, match=r"died \(exit code -9\) without a result"),
    ):
        _rebuild(kafka_bootstrap, topic, tmp_path / "killed.db", 2)
    assert killed
    assert multiprocessing.active_children() == []


class _Unreachable(SqliteProjectionStore):
    """A real SQLite store whose URL, as another process would open it, is a folder."""

    def __init__(self, path: Path, elsewhere: Path) -> None:
        super().__init__(path)
        self.url = sqlite_url(elsewhere)


def test_a_worker_that_raises_fails_the_replay_with_its_error(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    store = _Unreachable(tmp_path / "here.db", folder)
    settings = Settings(bootstrap_servers=kafka_bootstrap, events_topic=topic)
    try:
        with pytest.raises(Exception, match="unable to open database file") as caught:
            rebuild_projection(settings, store, workers=2)
    finally:
        store.close()
    assert any("in the replay worker of partitions" in n for n in caught.value.__notes__)
    assert "Traceback" in str(caught.value.__cause__)  # the worker's own traceback
    assert multiprocessing.active_children() == []


def _workers_of(pid: int) -> list[int]:
    """The spawned replay workers among ``pid``'s children (not multiprocessing's resource
    tracker, which ignores SIGINT and leaves when its parent does)."""
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            listed = children.read_text().split()
        except OSError:  # the thread ended between the listing and the read
            continue
        for child in listed:
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(int(child))
    return found


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"  # reaped soon
    except OSError:
        return True


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads children from /proc")
def test_ctrl_c_stops_the_cli_and_its_workers(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """SIGINT to the command (Ctrl-C) while a worker runs: it exits 130 at once and leaves no
    worker behind."""
    command = [
        sys.executable,
        "-c",
        "from runtrail_tools.cli.main import main; raise SystemExit(main())",
    ]
    command += ["replay", "projection", "--into", sqlite_url(tmp_path / "stopped.db")]
    command += ["--bootstrap-servers", kafka_bootstrap, "--events-topic", topic, "--workers", "2"]
    cli = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not (workers := _workers_of(cli.pid)) and cli.poll() is None:
            assert time.monotonic() < deadline, "no worker started"
            time.sleep(0.002)
        assert workers, "the command ended before a worker started"
        # once, to the command alone: it must stop its workers itself. Its handler is in place
        # before any worker spawns, so this one Ctrl-C cannot be lost (a second one, pressed
        # while the command stops, would be the user's "now": not what is tested here)
        os.kill(cli.pid, signal.SIGINT)
        _, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
    assert cli.returncode == 130, err.decode()
    assert all(_gone(pid) for pid in workers)


def test_the_plan_gives_whole_partitions_and_folds_here_when_it_must(tmp_path: Path) -> None:
    def ranges(*sizes: int) -> list[PartitionRange]:
        return [PartitionRange(p, 0, size) for p, size in enumerate(sizes)]

    store: ProjectionStore = open_store(PROJECTIONS, "sqlite:///:memory:")
    try:
        assert plan(ranges(10, 10), 2, store, None) is None  # nothing another process opens
    finally:
        store.close()
    disk = open_store(PROJECTIONS, sqlite_url(tmp_path / "plan.db"))
    try:
        assert plan(ranges(10, 10), 1, disk, None) is None
        assert plan(ranges(10, 0, 0), 4, disk, None) is None  # one partition holds events
        assert plan(ranges(500, 500), None, disk, None) is None  # too few to repay a process
        p = plan(ranges(30, 0, 10, 20, 5), 3, disk, None)
        assert p is not None and p.processes == 3
        # the spawned workers first take the smallest, the rest is shared largest first
        assert [r.partition for r in p.reserved] == [4, 2]
        assert [r.partition for r in p.shared] == [0, 3, 1]
        assert sorted(r.partition for r in p.ranges) == [0, 1, 2, 3, 4]
        with pytest.raises(ValueError):
            plan(ranges(10, 10), 0, disk, None)
    finally:
        disk.close()
