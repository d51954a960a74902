"""A three-broker cluster under load while its brokers fail: the scenario of the cluster fault
tests (tests/test_cluster_broker_kill.py, tests/test_cluster_rolling_restart.py).

The load: runtrail's :class:`~runtrail.publisher.Publisher` publishing steadily; the six
services of tests/test_outage_all_services.py (real ``runtrail run`` processes) consuming; an
outbox relay (``runtrail run outbox-relay``) putting command events on a topic of its own with
transactions, while commands are executed. Topics at RF 3 and ``min.insync.replicas`` 2, as
``topics ensure`` makes them on this cluster.

What is measured, printed as ``FIGURES …`` and listed at the end of the run (the test's
``figures`` property, tests/tiers.py) for the report: events published, lost (accepted
but not on the topic), doubled (on the topic twice), reordered (runs whose sequences go back in
topic order), and the stall: the longest time the events topic took no record (its
``LogAppendTime``), while the load ran at a steady rate.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from runtrail.commands.relay import OUTBOX_HEADER
from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.kafka.client_log import client_logger
from runtrail.kafka.topics import wait_for_topics
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.publisher import Publisher
from runtrail_tools.kafka.cluster import LocalCluster
from tests.commands_support import accept, command
from tests.sessions_support import session_forms
from tests.support import ServiceProcess, consume_all, end_offsets, wait_for
from tests.test_outage_all_services import PARTITIONS, SERVICES, TOPIC, Expected, Stack, missing

RELAY_TOPIC = "relay.events"
RELAY_RUNS = 4
SESSIONS = 6
#: events each session may have: more than a scenario publishes at its rate
EVENTS_PER_SESSION = 1200


def admin_of(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "logger": client_logger()})


def under_replicated(admin: AdminClient) -> list[str]:
    """Partitions whose in-sync set lacks a replica (what an operator waits on to be empty
    before restarting the next broker)."""
    topics = admin.list_topics(timeout=10).topics
    return [
        f"{name}/{pid}"
        for name, topic in topics.items()
        for pid, part in topic.partitions.items()
        if len(part.isrs) < len(part.replicas) or part.leader < 0
    ]


def leaders(admin: AdminClient, topic: str) -> Counter[int]:
    """How many partitions of ``topic`` each broker leads."""
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    return Counter(p.leader for p in parts)


class SteadyLoad:
    """The publisher, at a steady rate from a thread, until :meth:`stop`; what it accepted is
    :attr:`published` (sessions interleaved, so each session's events are a prefix)."""

    def __init__(self, bootstrap: str, spool: Path, rate_per_s: float) -> None:
        per_session = [
            session_forms(EVENTS_PER_SESSION, tenant=f"t{i}", session=f"s{i}", seed=f"seed{i}")
            for i in range(SESSIONS)
        ]
        self.forms = [f for group in zip(*per_session, strict=True) for f in group]
        self.publisher = Publisher(
            Settings(bootstrap_servers=bootstrap, events_topic=TOPIC, spool_dir=spool)
        )
        self.interval = 1.0 / rate_per_s
        self.published: list[dict[str, Any]] = []
        self.rejected: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for form in self.forms:
            if self._stop.is_set():
                return
            submitted = self.publisher.submit(form)
            if submitted.accepted:
                self.published.append(form)
            else:
                self.rejected.append(str(submitted))
            time.sleep(self.interval)

    def start(self) -> SteadyLoad:
        self.thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self.thread.join(30)
        assert self.publisher.drain(120), "the publisher's spool did not drain"
        self.publisher.close()
        assert not self.rejected, self.rejected
        assert len(self.published) < len(self.forms), "the workload ran out before the end"
        return self.published


class CommandLoad:
    """Commands executed steadily on a SQLite command store, whose outbox a relay process
    puts on :data:`RELAY_TOPIC`; :attr:`versions` counts each run's events."""

    def __init__(self, bootstrap: str, tmp_path: Path, rate_per_s: float) -> None:
        self.url = sqlite_url(tmp_path / "commands.db")
        self.store = open_store(COMMAND_EVENTS, self.url)
        self.interval = 1.0 / rate_per_s
        self.versions: dict[str, int] = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.relay = ServiceProcess(
            "outbox-relay",
            bootstrap,
            RELAY_TOPIC,
            group="unused",
            options={"store": self.url, "idle_poll_s": "0.05"},
            log_path=tmp_path / "outbox-relay.log",
        )
        self.relay_pid = self.relay.proc.pid

    def _run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            run = f"run-{turn % RELAY_RUNS}"
            version = self.versions.get(run, 0)
            if version == 0:
                done = self.store.execute(accept(run))
            else:
                data = {"budgetId": "b", "amount": 1.0, "unit": "usd"}
                done = self.store.execute(command("reserve_budget", run, version, data))
            assert done.accepted, done
            self.versions[run] = version + 1
            turn += 1
            self._stop.wait(self.interval)

    def start(self) -> CommandLoad:
        self.relay.metrics_port(90)
        self.thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self.thread.join(30)
        wait_for(lambda: self.store.outbox_size() == 0, 120, 0.2, what="the outbox to drain")
        return dict(self.versions)

    def close(self) -> int | None:
        status = self.relay.terminate(40) if self.relay.alive() else self.relay.proc.returncode
        self.relay.close()
        self.store.close()
        return status


@dataclass
class Figures:
    """What the report gives of one scenario."""

    name: str
    events: int
    lost: int
    doubled: int
    reordered: int
    stall_s: float
    relay_events: int
    relay_lost: int
    relay_doubled: int
    relay_reordered: int
    fault_s: float

    def line(self) -> str:
        return (
            f"FIGURES {self.name}: events={self.events} lost={self.lost} doubled={self.doubled} "
            f"reordered={self.reordered} stall_s={self.stall_s:.1f} | relay events="
            f"{self.relay_events} lost={self.relay_lost} doubled={self.relay_doubled} "
            f"reordered={self.relay_reordered} | fault lasted {self.fault_s:.1f} s"
        )


def events_on_topic(bootstrap: str, published: int) -> list[Any]:
    ends = end_offsets(bootstrap, TOPIC, PARTITIONS)
    messages = consume_all(bootstrap, TOPIC, expect=sum(ends.values()), timeout=60)
    assert len(messages) >= published or len(messages) == sum(ends.values())
    return messages


_codec = EventCodec()


def event_figures(
    published: list[dict[str, Any]], messages: list[Any], window: tuple[float, float]
) -> tuple[int, int, int, float]:
    """lost, doubled, reordered and the stall (seconds) of the events topic."""
    events = [_codec.decode(m.value()).event for m in messages]
    counts = Counter(e.event_id for e in events)
    lost = len({f["eventId"] for f in published} - set(counts))
    doubled = sum(n - 1 for n in counts.values())
    per_run: dict[tuple[str, str], list[int]] = defaultdict(list)
    for event in events:  # consume order is partition order, and a run is one partition
        per_run[(event.tenant_id, event.run_id)].append(event.sequence)
    reordered = sum(1 for seqs in per_run.values() if seqs != sorted(seqs))
    start, end = window
    stamps = sorted(m.timestamp()[1] / 1000 for m in messages)
    inside = [t for t in stamps if start - 1 <= t <= end]
    gaps = [b - a for a, b in itertools.pairwise(inside)]
    return lost, doubled, reordered, max(gaps, default=0.0)


def relay_figures(bootstrap: str, versions: dict[str, int]) -> tuple[int, int, int, int]:
    """events, lost, doubled, reordered of the relay's topic (read committed)."""
    expected = sum(versions.values())
    messages = consume_all(bootstrap, RELAY_TOPIC, expect=expected, timeout=60)
    per_run: dict[str, list[int]] = defaultdict(list)
    for message in messages:
        event = _codec.decode(message.value()).event
        assert dict(message.headers())[OUTBOX_HEADER] == str(event.sequence).encode()
        per_run[event.run_id].append(event.sequence)
    seen = Counter((run, seq) for run, seqs in per_run.items() for seq in seqs)
    want = {(run, seq) for run, n in versions.items() for seq in range(1, n + 1)}
    lost = len(want - set(seen))
    doubled = sum(n - 1 for n in seen.values())
    reordered = sum(1 for seqs in per_run.values() if seqs != sorted(seqs))
    return expected, lost, doubled, reordered


# --- the fixture and the scenario ----------------------------------------------------------------
@pytest.fixture
def stack(restartable_cluster: LocalCluster, tmp_path: Path) -> Iterator[Stack]:
    """Topics by ``topics ensure`` (the cluster's RF 3, min ISR 2), the relay's topic, and the
    six services, every one ready."""
    bootstrap = restartable_cluster.bootstrap_servers
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtrail_tools.cli.main",
            "topics",
            "ensure",
            "--bootstrap-servers",
            bootstrap,
            "--events-topic",
            TOPIC,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "replication factor 3" in done.stdout, done.stdout
    admin = admin_of(restartable_cluster)
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    topic = NewTopic(RELAY_TOPIC, num_partitions=3, replication_factor=3, config=config)
    admin.create_topics([topic])[RELAY_TOPIC].result(30)
    wait_for_topics(admin, [RELAY_TOPIC], timeout=30)
    services = Stack(bootstrap, tmp_path)
    try:
        wait_for(services.all_ready, 120, 0.5, what="every service ready")
        yield services
    finally:
        services.close()


def run_under_load(
    name: str,
    cluster: LocalCluster,
    stack: Stack,
    tmp_path: Path,
    fault: Callable[[AdminClient], None],
    record_property: Callable[[str, object], None],
) -> Figures:
    """Start the load, let it run, run ``fault``, let the load run on, stop it, and check
    everything: nothing lost, doubled or reordered, no process exited, every output complete
    and every audit chain valid. Prints and returns the figures."""
    bootstrap = cluster.bootstrap_servers
    admin = admin_of(cluster)
    commands = CommandLoad(bootstrap, tmp_path, rate_per_s=10).start()
    load = SteadyLoad(bootstrap, tmp_path / "spool", rate_per_s=20).start()
    try:
        time.sleep(4)
        started = time.time()
        fault(admin)
        ended = time.time()
        wait_for(lambda: not under_replicated(admin), 90, 0.5, what="every replica in sync")
        time.sleep(3)
        published = load.stop()
        versions = commands.stop()
        assert not stack.dead(), f"exited: {stack.dead()}\n{stack.log_tails(set(stack.dead()))}"
        assert commands.relay.alive() and commands.relay.proc.pid == commands.relay_pid

        expected = Expected(published, bootstrap)
        lacking: dict[str, str] = {}

        def complete() -> bool:
            lacking.clear()
            lacking.update(missing(stack, expected, bootstrap))
            return not lacking

        try:
            wait_for(complete, 120, 1.0, what="every output complete")
        except AssertionError:
            raise AssertionError(
                f"outputs incomplete: {lacking}\n{stack.log_tails(set(lacking))}"
            ) from None
        lost, doubled, reordered, stall = event_figures(
            published, events_on_topic(bootstrap, len(published)), (started, ended)
        )
        relay = relay_figures(bootstrap, versions)
        figures = Figures(
            name, len(published), lost, doubled, reordered, stall, *relay, ended - started
        )
        print(figures.line())
        record_property("figures", figures.line())  # the run's summary lists it (tests/tiers.py)
        assert (lost, doubled, reordered) == (0, 0, 0), figures.line()
        assert relay[1:] == (0, 0, 0), figures.line()
        assert {n: p.proc.pid for n, p in stack.procs.items()} == stack.pids
        assert stack.close() == dict.fromkeys(SERVICES, 0)
        assert commands.close() == 0
        return figures
    finally:
        load._stop.set()
        commands._stop.set()
        if commands.relay.alive():
            commands.close()
