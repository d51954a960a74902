"""The spool committer without Kafka: a batch is written whole, the cursor moves up to the
ledger's first unsettled event and no further, and a stored cursor survives a reopen; a
batch the broker acknowledged whole before its commit skips the fsync, but is synced before a
cursor refers past it; a resumed run is numbered after what the spool holds."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from runtrail.publisher.committer import SpoolCommitter
from runtrail.publisher.ledger import Ledger
from runtrail.publisher.recovery import spooled_sequences
from runtrail.publisher.sequencing import SequenceCounter
from runtrail.publisher.spool_record import SpoolRecord
from runtrail.publisher.wal import Wal


def record(n: int, run: str = "run-1") -> SpoolRecord:
    return SpoolRecord(
        key=run.encode(),
        value=f"event {n}".encode(),
        headers=(("rt.tenant", b"acme"),),
        event_id=f"id-{n}",
        timestamp_ms=1_700_000_000_000 + n,
        sequence=n + 1,
    )


def committer_on(folder: Path) -> tuple[Wal, Ledger, SpoolCommitter, threading.RLock]:
    wal = Wal.open_for(folder, "acme", "events")
    ledger = Ledger(wal.cursor.index, wal.end.index)
    lock = threading.RLock()
    stop = threading.Event()
    stop.set()  # no thread: each test commits by hand
    return wal, ledger, SpoolCommitter(wal, ledger, lock, stop, 50, "test-spool"), lock


def accept(ledger: Ledger, committer: SpoolCommitter, lock: threading.RLock, n: int) -> int:
    with lock:
        index = ledger.take()
        committer.add(record(n))
    return index


def test_the_cursor_moves_up_to_the_first_unsettled_event_and_no_further(tmp_path: Path) -> None:
    wal, ledger, committer, lock = committer_on(tmp_path)
    before = time.monotonic_ns()
    indices = []
    for n in range(3):  # three batches: each a boundary the cursor may stop at
        indices.append(accept(ledger, committer, lock, n))
        assert committer.durable_before_ns <= time.monotonic_ns()
        committer.commit()
    assert committer.durable_before_ns > before
    assert wal.end.index == 3 and wal.depth == 3

    ledger.settle(indices[0])
    ledger.settle(indices[2])  # settled out of order: the cursor must not pass index 1
    committer.commit()
    assert wal.cursor.index == 1
    ledger.settle(indices[1])
    committer.commit(store=True)
    assert wal.cursor.index == 3 and wal.depth == 0
    wal.close()

    reopened = Wal.open_for(tmp_path, "acme", "events")
    assert reopened.cursor.index == 3  # the stored cursor: nothing is sent again
    reopened.close()


def test_what_is_unsettled_at_close_is_in_the_spool_for_the_next_publisher(
    tmp_path: Path,
) -> None:
    wal, ledger, committer, lock = committer_on(tmp_path)
    first = accept(ledger, committer, lock, 0)
    accept(ledger, committer, lock, 1)
    accept(ledger, committer, lock, 2)
    ledger.settle(first)
    committer.commit(store=True)  # one batch of three: the cursor cannot split it
    wal.close()

    reopened = Wal.open_for(tmp_path, "acme", "events")
    assert reopened.depth == 3
    kept = [e.record for e in reopened.read(reopened.cursor, 10)]
    assert kept == [record(0), record(1), record(2)]
    # a resumed run_1 continues after sequence 3, whatever the resume asks for
    counter = SequenceCounter()
    counter.hold(spooled_sequences(reopened))
    assert counter.peek("acme", "run-1") == 4
    counter.set_next("acme", "run-1", 2)
    assert counter.peek("acme", "run-1") == 4
    counter.set_next("acme", "run-1", 9)
    assert counter.peek("acme", "run-1") == 9
    reopened.close()


def test_a_failed_write_keeps_the_batch_for_the_next_commit(tmp_path: Path) -> None:
    wal, ledger, committer, lock = committer_on(tmp_path)
    accepted = time.monotonic_ns()
    accept(ledger, committer, lock, 0)
    real_append = wal.append
    calls = 0

    def full_disk(records: list[SpoolRecord], sync: bool = True) -> None:
        nonlocal calls
        calls += 1
        raise OSError(28, "No space left on device")

    wal.append = full_disk  # type: ignore[method-assign,assignment]
    committer.commit()
    assert calls == 1 and wal.end.index == 0
    assert not committer.wait_durable(accepted, timeout=0)  # not on disk yet
    wal.append = real_append  # type: ignore[method-assign]
    accept(ledger, committer, lock, 1)
    committer.commit()
    assert wal.end.index == 2
    assert committer.wait_durable(accepted, timeout=0)
    assert [e.record for e in wal.read(wal.cursor, 10)] == [record(0), record(1)]
    wal.close()


def test_an_acknowledged_batch_skips_the_fsync_until_a_cursor_refers_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal, ledger, committer, lock = committer_on(tmp_path)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not path.is_dir():  # a new segment's folder entry is synced as before
            synced.append(path.suffix)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    for n in range(2):  # acknowledged before the commit: the broker holds them
        ledger.settle(accept(ledger, committer, lock, n))
    committer.commit()
    assert wal.end.index == 2 and synced == []
    accept(ledger, committer, lock, 2)  # not acknowledged: only the disk holds it
    committer.commit()
    assert synced == [".seg"]
    ledger.settle(2)
    ledger.settle(accept(ledger, committer, lock, 3))
    committer.commit(store=True)  # the cursor moves past the unsynced batch: synced first
    assert synced == [".seg", ".seg", ".tmp"]
    wal.close()
    reopened = Wal.open_for(tmp_path, "acme", "events")
    assert reopened.cursor.index == reopened.end.index == 4
    reopened.close()
