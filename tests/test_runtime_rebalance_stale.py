"""A message fetched before a rebalance took its partition never reaches the service after
``on_revoked`` (runtime.rebalance_window), on the real broker with the real client, with eager
``range`` assignment (every partition revoked) and incremental ``cooperative-sticky`` (only the
partition that moves: the member keeps reading the other one).

The loop gathers a batch over more than one ``consume()`` call right after a backlog: a wait
for the first message, then what came with it. Here the machine stalls between the two calls
(the real client, held for a few seconds after it handed the first message over: a busy host),
a second member joins the group meanwhile, and the next call serves the revoke. The message of
the first call belongs to the assignment that ended: the service must not see it then, and
whoever owns the partition next must (nothing lost).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState
from confluent_kafka.admin import AdminClient

from runtrail.config import Settings
from runtrail.resume.partitioning import partition_for
from runtrail.runtime import Delivered, Service, ServiceContext
from runtrail.runtime import runner as runner_module
from runtrail.runtime.delivery import Partition
from runtrail.runtime.runner import ServiceRunner
from tests.support import create_topic, form, produce_forms, unique_topic, wait_for

pytestmark = pytest.mark.kafka

BACKLOG = 3000  # past one fetch: the loop reads its end without waiting, then waits for one
#: how long the held caller waits after the group began to rebalance: past the runner's next
#: heartbeat (``heartbeat.interval.ms`` 2 s), whose answer queues the revoke
AFTER_REBALANCE_S = 3.0
#: the longest wait of a call once the hold is over
AFTER_RELEASE_WAIT_S = 0.5


class Stalling(Consumer):
    """The real client. The first call for one message (the loop's wait after a backlog) that
    returns it holds the caller after it until ``released``; after that no call waits more
    than :data:`AFTER_RELEASE_WAIT_S` (the test ends sooner). The calls are counted, so the
    test can tell which call served the revoke."""

    waiting = threading.Event()
    stalled = threading.Event()
    released = threading.Event()
    calls = 0
    #: the number of the call that stalled
    stall_call = 0

    def consume(self, num_messages: int = 1, timeout: float = -1) -> Any:
        cls = type(self)
        cls.calls += 1
        if num_messages == 1:
            cls.waiting.set()
        if cls.released.is_set() and not 0 <= timeout <= AFTER_RELEASE_WAIT_S:
            timeout = AFTER_RELEASE_WAIT_S
        messages = super().consume(num_messages=num_messages, timeout=timeout)
        if messages and num_messages == 1 and not cls.stalled.is_set():
            cls.stall_call = cls.calls
            cls.stalled.set()
            cls.released.wait(60)
        return messages


class Ledger(Service):
    """Records assignments, revokes and each processed (partition, offset), with the consume
    call count."""

    name = "ledger"

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.entries: list[tuple[str, int, int, int]] = []

    def on_assigned(self, partitions: Sequence[Partition]) -> None:
        self.entries += [("assigned", p, -1, Stalling.calls) for _, p in partitions]

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        self.entries += [("revoked", p, -1, Stalling.calls) for _, p in partitions]

    def process(self, batch: Sequence[Delivered]) -> None:
        self.entries += [("processed", d.source[1], d.offset, Stalling.calls) for d in batch]

    def processed(self) -> list[tuple[int, int]]:
        return [(p, offset) for what, p, offset, _ in self.entries if what == "processed"]


@pytest.fixture
def stalling(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Stalling]]:
    monkeypatch.setattr(runner_module, "Consumer", Stalling)
    Stalling.waiting.clear()
    Stalling.stalled.clear()
    Stalling.released.clear()
    Stalling.calls = Stalling.stall_call = 0
    yield Stalling


def rebalancing(bootstrap: str, group: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    return described.state in (
        ConsumerGroupState.PREPARING_REBALANCING,
        ConsumerGroupState.COMPLETING_REBALANCING,
    )


def joiner(
    bootstrap: str,
    group: str,
    topic: str,
    strategy: str,
    stop: threading.Event,
    got: list[tuple[int, int]],
) -> None:
    """A second member of the group: what it is given, it reads (and records)."""
    member = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": strategy,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    member.subscribe([topic])
    try:
        while not stop.is_set():
            for msg in member.consume(num_messages=100, timeout=0.2):
                if msg.error() is None:
                    got.append((int(msg.partition()), int(msg.offset())))  # type: ignore[arg-type]
    finally:
        member.close()


#: per strategy: the topic's partitions, and the one the joiner takes (cooperative-sticky moves
#: the first partition of the member that holds them all, as librdkafka's assignor does)
CASES = {"range": (1, 0), "cooperative-sticky": (2, 0)}


def _run_on(partition: int, partitions: int) -> str:
    """A run ID whose events go to ``partition``."""
    return next(
        run
        for run in (f"run-{i}" for i in range(1000))
        if partition_for(run, partitions) == partition
    )


@pytest.mark.parametrize("strategy", list(CASES))
def test_a_message_fetched_before_the_revoke_is_left_to_the_next_owner(
    kafka_bootstrap: str, tmp_path: Path, stalling: type[Stalling], strategy: str
) -> None:
    partitions, moved = CASES[strategy]
    run = _run_on(moved, partitions)
    topic = create_topic(kafka_bootstrap, unique_topic("stale"), partitions=partitions)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=partitions)
    backlog = [form(run_id=run, sequence=i) for i in range(1, BACKLOG + 1)]
    produce_forms(kafka_bootstrap, topic, backlog)
    group = f"g-{topic}"
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        batch_timeout_ms=30_000,  # after the backlog the loop waits this long for one message
        commit_interval_ms=100,
        assignment_strategy=strategy,
        group=group,
        state_dir=tmp_path / "state",
    )
    runner = ServiceRunner(Ledger, settings, service_name="ledger", metrics_port=0)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    stop, got = threading.Event(), list[tuple[int, int]]()
    member = threading.Thread(
        target=joiner, args=(kafka_bootstrap, group, topic, strategy, stop, got)
    )
    try:
        ledger: Ledger = runner.service  # type: ignore[assignment]
        wait_for(lambda: len(ledger.processed()) == BACKLOG, 60, what="the backlog")
        wait_for(stalling.waiting.is_set, 30, what="the loop's wait for one message")
        produce_forms(kafka_bootstrap, topic, [form(run_id=run, sequence=BACKLOG + 1)])
        assert stalling.stalled.wait(30), "the loop did not take the message after the backlog"
        member.start()  # joins while the loop is held: the next call serves the revoke
        wait_for(lambda: rebalancing(kafka_bootstrap, group), 30, 0.2, what="a rebalance")
        time.sleep(AFTER_REBALANCE_S)
        stalling.released.set()
        last = (moved, BACKLOG)  # the message taken by the stalled call
        wait_for(
            lambda: last in ledger.processed() or last in got, 60, what="its next owner reading it"
        )
    finally:
        stop.set()
        stalling.released.set()
        runner.request_stop()
        thread.join(30)
        if member.ident is not None:
            member.join(30)
    revoked = [(p, call) for what, p, _, call in ledger.entries if what == "revoked"]
    # the precondition: the call right after the stalled one revoked the partition of its
    # message (eager: every partition; cooperative: that one alone, the other stays)
    gone = range(partitions) if strategy == "range" else [moved]
    expected = [(p, stalling.stall_call + 1) for p in gone]
    assert revoked[: len(expected)] == expected, (revoked, ledger.entries[-5:])
    owned: dict[int, bool] = {}
    for what, p, offset, _ in ledger.entries:
        if what in ("assigned", "revoked"):
            owned[p] = what == "assigned"
        else:
            assert owned.get(p), f"{p}@{offset} processed after its partition was revoked"
