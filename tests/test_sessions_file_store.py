"""The file store under crashes and corruption: old or new, never broken; refusals name the file."""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail.sessions import AgentSessionSnapshot, CorruptSnapshot, SessionStoreError
from runtrail.sessions.store_file import FileSessionStore
from tests.sessions_support import REPO, built_snapshot, writer_command

KILLS = 14
PAYLOAD = 4000  # bytes of filler per event: a snapshot grows to several MB, so writes take time


@pytest.mark.slow
def test_sigkill_mid_save_leaves_the_old_or_the_new_snapshot_never_a_broken_one(
    tmp_path: Path,
) -> None:
    url = (tmp_path / "sessions").as_uri()
    store = FileSessionStore.from_url(url)
    path = store.path_of("t1", "s1")
    rng = random.Random(20261129)
    seen: list[int] = []
    torn = 0
    stop = threading.Event()
    reader_errors: list[BaseException] = []

    def read_while_writing() -> None:  # a concurrent reader must never see a broken file
        while not stop.is_set():
            try:
                store.load("t1", "s1")
                time.sleep(0.02)
            except BaseException as exc:
                reader_errors.append(exc)
                return

    reader = threading.Thread(target=read_while_writing, daemon=True)
    reader.start()
    try:
        for _ in range(KILLS):
            before = len(list(path.parent.glob(".*.tmp"))) if path.parent.exists() else 0
            child = subprocess.Popen(
                writer_command("grow", url, str(PAYLOAD)),
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert child.stdout is not None
            assert child.stdout.readline().strip() == b"ready", (
                child.stderr.read() if child.stderr else ""
            )
            time.sleep(rng.uniform(0.0, 0.25))
            child.kill()
            child.wait(10)
            loaded = store.load("t1", "s1")  # raises CorruptSnapshot if the kill broke it
            assert loaded is not None
            seen.append(loaded.revision)
            torn += len(list(path.parent.glob(".*.tmp"))) - before
    finally:
        stop.set()
        reader.join(10)
    assert not reader_errors, reader_errors[0]
    final = store.load("t1", "s1")
    assert final is not None
    assert final.digest == built_snapshot(final.revision, payload=PAYLOAD).digest
    assert seen == sorted(seen) and seen[-1] > seen[0]  # every restart continued what it found
    # the kills really landed inside saves: their temporary files were left behind, unused
    assert torn > 0, "no kill interrupted a save; the test proved nothing"


def test_a_corrupted_snapshot_file_is_refused_with_an_error_naming_it(tmp_path: Path) -> None:
    store = open_store(SESSION_SNAPSHOTS, (tmp_path / "sessions").as_uri())
    assert isinstance(store, FileSessionStore)
    snapshot = built_snapshot(20)
    store.save(snapshot)
    path = store.path_of("t1", "s1")
    good = path.read_bytes()

    path.write_bytes(good.replace(b'"message":"a1"', b'"message":"A1"', 1))  # content altered
    with pytest.raises(CorruptSnapshot, match="digest mismatch") as caught:
        store.load("t1", "s1")
    assert str(path) in str(caught.value) and caught.value.where == str(path)

    path.write_bytes(good[: len(good) // 3])  # torn
    with pytest.raises(CorruptSnapshot, match=str(path)):
        store.load("t1", "s1")

    other = built_snapshot(4, session="s2")
    path.write_bytes(other.to_bytes())  # intact, but another session's
    with pytest.raises(CorruptSnapshot, match="holds session t1/s2"):
        store.load("t1", "s1")

    path.write_bytes(good)
    loaded = store.load("t1", "s1")
    assert loaded is not None and loaded.digest == snapshot.digest


def test_save_all_if_overlaps_the_saves_and_stops_at_a_failing_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saves of one batch are in flight together (each mostly waits on its fsync). A
    corrupted stored snapshot is refused and kept, the other saves go on; a store that fails a
    write (ENOSPC, injected: a full disk cannot be made to fail one save on cue) stops the
    batch: nothing more is taken, and every save taken has its outcome."""
    import errno

    from runtrail.sessions import store_file

    store = FileSessionStore(tmp_path / "sessions")
    real = store_file.write_atomic
    both_in_flight = threading.Barrier(2, timeout=10)
    mode = {"now": "overlap"}

    def write_atomic(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
        if mode["now"] == "overlap":
            both_in_flight.wait()  # one save at a time would never get past this
        elif mode["now"] == "full":
            raise OSError(errno.ENOSPC, "No space left on device (injected)", str(path))
        real(path, data, sync_dir=sync_dir)

    monkeypatch.setattr(store_file, "write_atomic", write_atomic)
    pair = [built_snapshot(3, session="a"), built_snapshot(3, session="b")]
    assert store.save_all_if((s, None) for s in pair) == [True, True]

    mode["now"] = "plain"
    path_a = store.path_of("t1", "a")
    edited = path_a.read_bytes().replace(b'"message":"a1"', b'"message":"A1"', 1)
    path_a.write_bytes(edited)
    later = [built_snapshot(4, session="a"), built_snapshot(4, session="b")]
    outcomes = store.save_all_if(zip(later, [pair[0].digest, pair[1].digest], strict=True))
    assert isinstance(outcomes[0], CorruptSnapshot) and outcomes[1:] == [True]
    assert path_a.read_bytes() == edited  # the evidence is kept

    mode["now"] = "full"
    taken: list[int] = []

    def slowly() -> Iterator[tuple[AgentSessionSnapshot, None]]:
        for count in range(5, 25):
            taken.append(count)
            time.sleep(0.05)  # the first write fails long before the last is built
            yield built_snapshot(count, session=f"new{count}"), None

    outcomes = store.save_all_if(slowly())
    assert len(outcomes) == len(taken) < 20
    assert all(isinstance(o, OSError) and o.errno == errno.ENOSPC for o in outcomes)
    store.close()


def test_an_unreadable_store_folder_is_an_error_not_an_absence(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path / "sessions")
    path = store.path_of("t1", "s1")
    path.parent.mkdir(parents=True)
    path.mkdir()  # a folder where the file should be
    with pytest.raises(SessionStoreError, match=str(path)):
        store.load("t1", "s1")
