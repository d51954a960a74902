"""A commit in flight when the broker is SIGKILLed: SIGTERM still stops the service cleanly.

noop commits after every turn (``RUNTRAIL_COMMIT_INTERVAL_MS=0``) while events arrive
steadily, so the broker dies with an offset commit waiting for the group coordinator. Before
commits were bounded, that commit blocked the consume loop forever and SIGTERM's handler
never ran. Now: the service turns not ready, SIGTERM makes it exit 0 within
``shutdown_timeout_s`` without committing more, and once the broker is back a new process
starts at the group's commit and finishes the topic: nothing lost, and it repeats only what
was never committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from runtrail.config import Settings
from runtrail.runtime import Delivered, Service
from runtrail.runtime.commit_procedure import CommitProcedure
from runtrail.runtime.commits import CommitRequest, Committer, CommitTimedOut
from runtrail.runtime.retry import classify
from runtrail.runtime.runner import ServiceRunner
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail_tools.kafka.broker import LocalBroker
from tests.support import (
    ServiceProcess,
    committed_offsets,
    create_topic,
    encode,
    end_offsets,
    form,
    read_lines,
    unique_topic,
    wait_for,
)
from tests.test_outage_output_topics import sigkill
from tests.test_runtime_outage import _status

pytestmark = pytest.mark.kafka
PARTITIONS = 3
EVENTS = 1500
SHUTDOWN_S = 10.0


class Publisher(threading.Thread):
    """Publishes steadily; the messages wait in the producer while the broker is away."""

    def __init__(self, bootstrap: str, topic: str, forms: list[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.topic, self.forms = topic, forms
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "message.timeout.ms": 0,
                "partitioner": "murmur2_random",
            }
        )

    def run(self) -> None:
        for f in self.forms:
            self.producer.produce(self.topic, value=encode(f), key=str(f["runId"]))
            self.producer.poll(0)
            time.sleep(0.004)

    def finish(self) -> None:
        self.join(120)
        assert self.producer.flush(120) == 0, "events left unpublished"


def _offsets(lines: list[str]) -> list[tuple[int, int]]:
    return [(int(p), int(o)) for _, p, o in (line.split() for line in lines)]


def _service(bootstrap: str, topic: str, out: Path, log: Path) -> ServiceProcess:
    return ServiceProcess(
        "noop",
        bootstrap,
        topic,
        group=f"g-{topic}",
        options={"output": str(out)},
        env={
            "RUNTRAIL_COMMIT_INTERVAL_MS": "0",  # a commit after every turn: one is in flight
            "RUNTRAIL_SHUTDOWN_TIMEOUT_S": str(SHUTDOWN_S),
        },
        log_path=log,
    )


def test_sigterm_with_a_commit_in_flight_exits_0_and_a_restart_loses_nothing(
    restartable_broker: LocalBroker, tmp_path: Path
) -> None:
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("inflight"), partitions=PARTITIONS)
    create_topic(bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    out, log = tmp_path / "noop.out", tmp_path / "noop.log"
    forms = [form(run_id=f"r{i % 20}", sequence=i // 20 + 1) for i in range(EVENTS)]
    first = _service(bootstrap, topic, out, log)
    publisher = Publisher(bootstrap, topic, forms)
    try:
        port = first.metrics_port()
        wait_for(lambda: _status(port, "/readyz") == 200, 60, what="ready")
        publisher.start()
        wait_for(lambda: len(read_lines(out)) >= 300, 60, what="events flowing")
        sigkill(broker)  # mid-stream: the next commit waits for a coordinator that is gone
        wait_for(lambda: _status(port, "/readyz") == 503, 40, what="503")
        started = time.monotonic()
        status = first.terminate(timeout=SHUTDOWN_S + 20)
        took = time.monotonic() - started
        text = log.read_text(errors="replace")
        assert status == 0, text[-3000:]  # not the watchdog's 2, nor a hang
        # the loop sees the stop flag within about a second, then the shutdown bound holds
        assert took < SHUTDOWN_S + 2, f"shutdown took {took:.1f}s"
        assert "no result from the group coordinator" in text, text[-3000:]
    finally:
        first.close()
    old = _offsets(read_lines(out))

    broker.start()
    publisher.finish()
    start_at = committed_offsets(bootstrap, f"g-{topic}", topic, PARTITIONS)
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    assert sum(ends.values()) == EVENTS
    second = _service(bootstrap, topic, out, tmp_path / "noop2.log")
    try:
        wait_for(
            lambda: (
                len(read_lines(out))
                >= len(old) + sum(ends.values()) - sum(max(0, c) for c in start_at.values())
            ),
            90,
            what="the rest of the topic",
        )
        assert second.terminate(30) == 0
    finally:
        second.close()
    new = _offsets(read_lines(out))[len(old) :]

    # nothing lost: every offset of the topic is in the file
    everything = {(p, o) for p, end in ends.items() for o in range(end)}
    assert set(old) | set(new) == everything
    # each process wrote each offset once; the first committed nothing it had not written
    assert max(Counter(old).values()) == 1 and max(Counter(new).values()) == 1
    written = Counter(p for p, _ in old)
    for p, at in start_at.items():
        assert max(0, at) <= written[p], f"partition {p}: committed {at}, written {written[p]}"
        # the new process starts exactly at the commit: it repeats only what was never committed
        assert sorted(o for q, o in new if q == p) == list(range(max(0, at), ends[p]))


def test_each_commit_result_confirms_only_its_own_offsets(kafka_bootstrap: str) -> None:
    """Two commits in flight (the revoke path's case), and a stray result: each request is
    confirmed by its own result only, in order; the group ends at the newer offset."""
    topic = create_topic(kafka_bootstrap, unique_topic("match"), partitions=1)
    committer = Committer("test")
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
            "on_commit": committer.on_commit,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        older = committer.submit(consumer, [TopicPartition(topic, 0, 5)], generation=0)
        newer = committer.submit(consumer, [TopicPartition(topic, 0, 9)], generation=0)
        committer.on_commit(None, [TopicPartition(topic, 0, 7)])  # offsets no request has
        assert not older.done.is_set() and not newer.done.is_set()

        def serve(timeout: float) -> None:
            assert consumer.consume(num_messages=10, timeout=timeout) == []

        assert committer.wait(newer, 30, lambda: False, serve)
        assert older.done.is_set() and older.error is None and newer.error is None
        assert list(committer.requests) == [older, newer]  # the runner takes them, in order
        (got,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert got.offset == 9
    finally:
        consumer.close()


def test_no_result_in_time_is_a_retryable_kafka_problem() -> None:
    problem = classify(CommitTimedOut(5.0, [TopicPartition("t", 0, 3)]))
    assert problem is not None and problem.what == "kafka"
    assert "t[0]@3" in problem.detail and "within 5.0s" in problem.detail


class _Idle(Service):
    name = "idle"

    def process(self, batch: Sequence[Delivered]) -> None:
        pass


def _runner_with_a_silent_request(tmp_path: Path, generation: int) -> ServiceRunner:
    """A runner holding one commit that was sent long ago and never got a result."""
    settings = Settings(
        bootstrap_servers="127.0.0.1:1",  # never reached: nothing here talks to Kafka
        events_topic="t",
        commit_timeout_s=5.0,
        state_dir=tmp_path,
    )
    runner = ServiceRunner(_Idle, settings, service_name="idle", metrics_port=0)
    request = CommitRequest([TopicPartition("t", 0, 74)], generation=generation)
    request.sent_at -= 200.0
    runner.commits._committer.requests.append(request)
    return runner


def _close(runner: ServiceRunner) -> None:
    runner._consumer.close()
    runner._dlq.close(timeout=0)
    runner._http._server.server_close()  # never started: nothing to shut down


def test_a_commit_left_in_flight_by_lost_partitions_is_given_up_not_waited_for_forever(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Partitions lost in an outage with a commit in flight: the client may never bring its
    result. It would confirm nothing (another generation), so past its bound it is given up
    and the next commit can go, instead of ``_TIMED_OUT`` on every turn for good (seen
    after a 30 s broker outage: audit stopped committing)."""
    runner = _runner_with_a_silent_request(tmp_path, generation=0)
    try:
        runner.commits.generation = 1  # the partitions were lost, then assigned again
        with caplog.at_level(logging.WARNING):
            assert runner.commits.finish(None, keep_messages=True) is True
        assert runner.commits.requests == 0
        assert "gave up a commit of t[0]@74 from before a rebalance" in caplog.text
    finally:
        _close(runner)


def test_a_commit_of_this_assignment_with_no_result_is_still_a_timeout(tmp_path: Path) -> None:
    """The same silence within one assignment is not given up: the next commit must not
    overtake it, so it stays a retryable ``_TIMED_OUT``."""
    runner = _runner_with_a_silent_request(tmp_path, generation=0)
    try:
        with pytest.raises(CommitTimedOut, match=r"t\[0\]@74"):
            runner.commits.finish(None, keep_messages=True)
        assert runner.commits.requests == 1
    finally:
        _close(runner)


def test_output_flushed_before_a_dead_letter_failed_is_where_a_lost_partition_restarts(
    tmp_path: Path,
) -> None:
    """The service's output was written, then the dead letters could not be (the broker
    gone), then the partition was lost: it restarts after what was written, not at the last
    commit, even when the group's commit cannot be read. (Restarting at the last commit
    wrote 346 of noop's lines twice after a 120 s broker outage.)"""
    runner = _runner_with_a_silent_request(tmp_path, generation=0)
    runner.commits._committer.requests.clear()
    written: list[int] = []
    tp = ("t", 0)

    def no_dead_letters(timeout: float) -> None:
        raise StoreUnavailable("dead-letter topic t.dlq", "the broker is gone")

    procedure = CommitProcedure(
        "idle",
        runner.settings,
        runner.checkpoint,
        runner.metrics,
        runner.health,
        flush_service=lambda: written.append(runner.checkpoint.positions()[tp]),
        after_flush=lambda: None,
        flush_dead_letters=no_dead_letters,
        serve=lambda timeout, keep: None,
        waiting_out=lambda: True,
        stopping=lambda: False,
    )
    try:
        runner.checkpoint.reached({tp: 40})
        with pytest.raises(StoreUnavailable):
            procedure.commit(runner._consumer, force=True)
        assert written == [40]
        runner.checkpoint.lost([tp])
        runner.checkpoint.assigned([tp])
        back = [TopicPartition(*tp)]  # the group's commit: unreachable (no broker at :1)
        procedure.skip_durable(runner._consumer, back)
        assert back[0].offset == 40
        assert runner.checkpoint.restart_points([tp]) == {}  # applied once
    finally:
        _close(runner)


def _refused(runner: ServiceRunner, offset: int) -> None:
    """A commit of this assignment the coordinator refused: the group was rebalancing."""
    request = CommitRequest([TopicPartition("t", 0, offset)], generation=0)
    request.error = KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION))
    request.done.set()
    runner.commits._committer.requests.append(request)


def test_a_commit_refused_while_the_group_rebalances_stays_due_and_is_no_outage(
    tmp_path: Path,
) -> None:
    """With incremental assignment a member keeps partitions through a rebalance, and its
    commit meets ``ILLEGAL_GENERATION`` (librdkafka #4059): the offsets are committed again
    after the rebalance, with no outage (which reported 503 and skipped the revoke's commit,
    ``test_runtime_reliability``). Refused for longer than the commit bound, it is one."""
    runner = _runner_with_a_silent_request(tmp_path, generation=0)
    runner.commits._committer.requests.clear()
    tp = ("t", 0)
    try:
        runner.checkpoint.assigned([tp])
        runner.checkpoint.reached({tp: 74})
        assert runner.checkpoint.due() == {tp: (74, None)}
        _refused(runner, 74)
        assert runner.commits.finish(None, keep_messages=True) is True
        assert runner.checkpoint.due() == {tp: (74, None)}, "the refused offset is due again"
        runner.commits._refused_since = time.monotonic() - runner.commits.bound()
        _refused(runner, 74)
        with pytest.raises(KafkaException) as raised:
            runner.commits.finish(None, keep_messages=True)
        problem = classify(raised.value)
        assert problem is not None and "ILLEGAL_GENERATION" in problem.detail
    finally:
        _close(runner)
