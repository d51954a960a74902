"""The publisher's durability window as users set it: ``RUNTRAIL_SPOOL_COMMIT_MS`` in the
agent's environment is the group commit interval of its write-ahead spool. (The committer
given an interval directly: test_publisher_committer.py; the crash invariant at the default:
test_publisher_wal.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.publisher import Publisher


def test_spool_commit_ms_from_the_environment_is_the_window_an_event_waits_for_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RUNTRAIL_SPOOL_COMMIT_MS=1500`` an accepted event is not yet durable (written and
    fsynced: what survives a SIGKILL) 0.7 s later, and is within the next commit. The docs
    promise an agent killed within this window may lose the event; if the publisher ignored
    the variable it would commit every 10 ms, so an operator trading durability for fewer
    fsyncs (or the reverse, with a smaller value) would not get what was set."""
    monkeypatch.setenv("RUNTRAIL_SPOOL_COMMIT_MS", "1500")
    settings = Settings(
        bootstrap_servers="127.0.0.1:1",  # no broker: the event stays in the spool
        spool_dir=tmp_path / "spool",
        tenant="t1",
        events_topic="events",
    )
    with Publisher(settings, retry_backoff_s=5.0, retry_backoff_max_s=5.0) as pub:
        assert pub.publish("MODEL_REASONING", "run-1", {"text": "a thought"}) is not None
        accepted = time.monotonic_ns()
        assert not pub.wait_durable(accepted, timeout=0.7)
        assert pub.wait_durable(accepted, timeout=3.0)
        waited_s = (time.monotonic_ns() - accepted) / 1e9
        assert waited_s >= 1.0, waited_s
        pub.close(timeout=0.5)
