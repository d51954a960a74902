"""Consumer runtime settings as users set them, in a service's environment:
``RUNTRAIL_AUTO_OFFSET_RESET`` (where a new group starts) and ``RUNTRAIL_COMMIT_TIMEOUT_S``
(how long an offset commit may go without a result)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from runtrail.config import Settings
from runtrail.runtime import Delivered, Service
from runtrail.runtime.commits import CommitRequest, CommitTimedOut
from runtrail.runtime.runner import ServiceRunner
from tests.support import (
    ServiceProcess,
    create_topic,
    form,
    produce_forms,
    read_lines,
    unique_topic,
)


def test_auto_offset_reset_latest_starts_a_new_group_after_what_the_topic_holds(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A new group of a service run with ``RUNTRAIL_AUTO_OFFSET_RESET=latest`` processes the
    events published after it joined and none of those already on the topic. If the variable
    were ignored (the default, earliest), the service would go through the whole history: a
    new group told to start at the end would record every old event again."""
    topic = create_topic(kafka_bootstrap, unique_topic("reset"), partitions=2)
    old = [form("MODEL_RESPONSE", run_id=f"old-{i}") for i in range(6)]
    produce_forms(kafka_bootstrap, topic, old)
    out = tmp_path / "noop.out"
    proc = ServiceProcess(
        "noop",
        kafka_bootstrap,
        topic,
        group=f"g-{topic}",
        options={"output": str(out)},
        env={"RUNTRAIL_AUTO_OFFSET_RESET": "latest"},
        log_path=tmp_path / "noop.log",
    )
    new: list[str] = []
    try:
        deadline = time.monotonic() + 30

        def a_new_event_processed() -> bool:
            seen = {line.split(" ")[0] for line in read_lines(out)}
            return any(event_id in seen for event_id in new)

        # the group's start is fixed once it has fetched: until then a new event may be
        # skipped as history, so a new one is published until one is processed
        while not a_new_event_processed():
            assert time.monotonic() < deadline, "no new event processed in 30 s"
            canary = form("MODEL_RESPONSE", run_id=f"new-{len(new)}")
            new.append(canary["eventId"])
            produce_forms(kafka_bootstrap, topic, [canary])
            time.sleep(0.5)
        assert proc.terminate() == 0
    finally:
        proc.close()
    processed = {line.split(" ")[0] for line in read_lines(out)}
    assert not processed & {f["eventId"] for f in old}, "old events processed"
    assert processed <= set(new)


class _Idle(Service):
    name = "idle"

    def process(self, batch: Sequence[Delivered]) -> None:
        pass


@pytest.mark.parametrize(
    ("timeout_s", "silent_s", "timed_out"), [("30", 12.0, False), ("2", 3.0, True)]
)
def test_commit_timeout_s_from_the_environment_is_the_bound_on_a_silent_commit(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    timeout_s: str,
    silent_s: float,
    timed_out: bool,
) -> None:
    """A commit sent ``silent_s`` ago with no result yet is still waited for while within
    ``RUNTRAIL_COMMIT_TIMEOUT_S`` (30 s, capped at shutdown_timeout_s's 15 s: 12 s of silence
    is no failure) and is a retryable timeout past it (2 s: 3 s of silence is). Ignored (the default 5 s), a slow but healthy
    coordinator would be taken for a failure (the service not ready, the commit retried) under
    a 30 s setting, and a dead one waited for longer than the 2 s an operator asked for."""
    monkeypatch.setenv("RUNTRAIL_COMMIT_TIMEOUT_S", timeout_s)
    settings = Settings(bootstrap_servers="127.0.0.1:1", events_topic="t", state_dir=tmp_path)
    runner = ServiceRunner(_Idle, settings, service_name="idle", metrics_port=0)
    try:
        request = CommitRequest([TopicPartition("t", 0, 74)], generation=0)
        request.sent_at -= silent_s
        runner.commits._committer.requests.append(request)
        if timed_out:
            with pytest.raises(CommitTimedOut, match=r"t\[0\]@74"):
                runner.commits.finish(None, keep_messages=True)
        else:
            assert runner.commits.finish(None, keep_messages=True) is False  # still waited for
        assert runner.commits.requests == 1  # still the one in flight: nothing taken as done
    finally:
        runner._consumer.close()
        runner._dlq.close(timeout=0)
        runner._http._server.server_close()  # never started: nothing to shut down
