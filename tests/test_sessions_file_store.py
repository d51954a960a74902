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
from runtrail.sessions.snapshot import parse_snapshot
from runtrail.sessions.store_file import LOCK_STRIPES, FileSessionStore
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
    spare = path.parent / f".{path.name}.spare"  # written, then swapped with the snapshot
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
            torn += interrupted_save(spare, loaded.revision)
    finally:
        stop.set()
        reader.join(10)
    assert not reader_errors, reader_errors[0]
    final = store.load("t1", "s1")
    assert final is not None
    assert final.digest == built_snapshot(final.revision, payload=PAYLOAD).digest
    assert seen == sorted(seen) and seen[-1] > seen[0]  # every restart continued what it found
    # the kills really landed inside saves: a spare was left written, never swapped in
    assert torn > 0, "no kill interrupted a save; the test proved nothing"


def interrupted_save(spare: Path, stored_revision: int) -> int:
    """1 if the spare shows a save killed before its swap, else 0: a partial snapshot (killed
    mid-write), or a whole one newer than the stored one (killed after the write or its fsync).
    After a save that finished, the spare holds the snapshot before the stored one."""
    try:
        left = parse_snapshot(spare.read_bytes(), str(spare))
    except FileNotFoundError:
        return 0
    except CorruptSnapshot:
        return 1
    return int(left.revision > stored_revision)


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
    real = store_file.replace_via_spare
    both_in_flight = threading.Barrier(2, timeout=10)
    mode = {"now": "overlap"}

    def replace_via_spare(path: Path, data: bytes, spare: Path, *, sync_dir: bool = True) -> None:
        if mode["now"] == "overlap":
            both_in_flight.wait()  # one save at a time would never get past this
        elif mode["now"] == "full":
            raise OSError(errno.ENOSPC, "No space left on device (injected)", str(path))
        real(path, data, spare, sync_dir=sync_dir)

    monkeypatch.setattr(store_file, "replace_via_spare", replace_via_spare)
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


def test_saves_swap_two_files_and_a_delete_removes_both(tmp_path: Path) -> None:
    """A save writes the session's spare and swaps it with the stored file: no file is made or
    freed per save (on ext4 without a journal, every freed inode slows the next allocation
    for a minute or more). The spare then holds the replaced snapshot, so deleting the
    session (an erasure, retention) deletes it too."""
    store = FileSessionStore(tmp_path / "sessions")
    path = store.path_of("t1", "s1")
    spare = path.parent / f".{path.name}.spare"
    saved = [built_snapshot(n) for n in range(1, 6)]
    inodes = set()
    for snapshot in saved:
        assert store.save(snapshot)
        inodes.add(path.stat().st_ino)
        if spare.exists():
            inodes.add(spare.stat().st_ino)
    assert len(inodes) == 2  # the first save's file and one spare, swapped ever since
    assert parse_snapshot(spare.read_bytes(), str(spare)).digest == saved[-2].digest
    loaded = store.load("t1", "s1")
    assert loaded is not None and loaded.digest == saved[-1].digest
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert [s.session_id for s in store.list("t1")] == ["s1"]  # the spare is not a session
    assert store.delete("t1", "s1")
    assert not path.exists() and not spare.exists()
    assert not store.delete("t1", "s1")
    store.close()


def test_a_folder_holds_a_bounded_number_of_lock_files_whatever_its_sessions(
    tmp_path: Path,
) -> None:
    """Writers of a session lock one of the folder's ``LOCK_STRIPES`` lock files, so a new
    session is one file (and its spare) more, and deleting sessions leaves no lock behind: a
    lock file of one session alone (the layout before) goes with its session."""
    store = FileSessionStore(tmp_path / "sessions")
    sessions = [f"s{n}" for n in range(150)]
    outcomes = store.save_all_if((built_snapshot(2, session=s), None) for s in sessions)
    assert outcomes == [True] * len(sessions)
    folder = store.path_of("t1", "s0").parent
    locks = sorted(p.name for p in folder.iterdir() if "lock" in p.name)
    assert 1 < len(locks) <= LOCK_STRIPES and all(n.startswith(".lock-") for n in locks), locks
    assert [s.session_id for s in store.list("t1")] == sorted(sessions)
    own = folder / ".s0.json.lock"
    own.touch()
    assert store.delete("t1", "s0")
    assert not own.exists()
    store.close()


def test_writers_of_one_session_take_turns_so_one_compare_and_set_wins(tmp_path: Path) -> None:
    """Four writers of one session, each on its own thread (each opens the lock file, and a
    ``flock`` is held per open file, so threads exclude each other as processes do), replace
    the same stored snapshot with snapshots of their own at once: in every round exactly one
    compare-and-set wins."""
    store = FileSessionStore(tmp_path / "sessions")
    assert store.save(built_snapshot(2))

    def write(
        snapshot: AgentSessionSnapshot, expected: str, start: threading.Barrier, wins: list[bool]
    ) -> None:
        start.wait()
        wins.append(store.save_if(snapshot, expected))

    for round_no in range(25):
        stored = store.load("t1", "s1")
        assert stored is not None
        start = threading.Barrier(4)
        wins: list[bool] = []
        writers = [
            threading.Thread(
                target=write,
                args=(built_snapshot(3 + 4 * round_no + i), stored.digest, start, wins),
            )
            for i in range(4)
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(30)
        assert sorted(wins) == [False, False, False, True], (round_no, wins)
    store.close()


def test_without_the_swap_a_save_renames_its_spare_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``renameat2(RENAME_EXCHANGE)`` is refused (another OS, a file system without it),
    the written spare is renamed over the stored file, as a temporary file would be."""
    from runtrail import files

    refused: list[tuple[Path, Path]] = []

    def no_exchange(first: Path, second: Path) -> bool:
        refused.append((first, second))
        return False

    monkeypatch.setattr(files, "exchange", no_exchange)
    store = FileSessionStore(tmp_path / "sessions")
    for count in (2, 3):
        assert store.save(built_snapshot(count))
    path = store.path_of("t1", "s1")
    assert refused and not (path.parent / f".{path.name}.spare").exists()
    loaded = store.load("t1", "s1")
    assert loaded is not None and loaded.revision == 3
    store.close()


def test_a_read_that_overlapped_a_rewrite_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers take no lock. A swap leaves the file a reader opened whole, but the next save
    rewrites that file as its spare: a slow reader can get part of it (injected here, a race
    this test cannot time). A load, and an erasure's search, read again while the file keeps
    changing, instead of calling the snapshot corrupt or missing the session; bytes that fail
    twice alike are refused as before."""
    from runtrail.sessions import store_file

    store = FileSessionStore(tmp_path / "sessions")
    snapshot = built_snapshot(6)
    assert store.save(snapshot)
    real = store_file._read
    torn = {"left": 0}

    def read(path: Path) -> bytes:
        data = real(path)
        if torn["left"]:
            torn["left"] -= 1
            return data[: len(data) // 2]  # the read met a save rewriting the file
        return data

    monkeypatch.setattr(store_file, "_read", read)
    torn["left"] = 1
    loaded = store.load("t1", "s1")
    assert loaded is not None and loaded.digest == snapshot.digest
    torn["left"] = 1
    assert store.sessions_holding("t1", ["run-a"]) == ["s1"]
    path = store.path_of("t1", "s1")
    path.write_bytes(path.read_bytes()[:-5])  # really broken: the same bytes every read
    with pytest.raises(CorruptSnapshot):
        store.load("t1", "s1")
    store.close()
