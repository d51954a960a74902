"""Incremental ``cooperative-sticky`` assignment under faults, on the real broker.

Members joining and leaving cleanly are tested elsewhere (``tests/test_*_cooperative.py``); the
eager versions of these faults in ``test_runtime_reliability.py`` and ``test_runtime_outage.py``.
Here are the paths only a fault takes with incremental assignment:

- **a member SIGKILLed** under a steady stream (three noop members):
  its partitions move only once its session timed out; the survivors get an incremental assign
  of them and keep their own (no revoke); started again, it takes some back through a clean
  incremental revoke (``commit sent``). Nothing is lost. noop (one line per event, ``eventId
  partition offset``, each process its own file) may hold an event twice only where the killed
  member wrote it and had not committed it (one of its partitions, at or past the group's commit
  at the kill) (the projector and audit run the same assignment path, taken up at their
  stores' offsets as in the broker case below);
- **the broker SIGKILLed** past the session timeout under two members of each of noop, the
  projector and audit: each member's session times out in the client, which takes the lost
  path (``_on_lost``: ``lost … (not committed)``, ``incremental_unassign``); once the broker is
  back every member keeps its PID, rejoins, holds partitions again and answers ready, and the
  outputs are complete. noop may hold an event twice only where a member had written it before
  it lost the partition, without a commit, and another member read it again (a member that
  gets its own partition back starts after what it wrote); the stores double nothing.

The session timeout is the broker's minimum (``group.min.session.timeout.ms``, 6 s), set
through ``RUNTRAIL_KAFKA_OPTIONS`` (it is not one of the options the runtime pins).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtrail.audit import verify_stored
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_tools.kafka.broker import LocalBroker
from tests.projector_support import metric, scrape, stored_offsets
from tests.scale_support import SteadyStream, assignor, log_text, outages
from tests.support import (
    ServiceProcess,
    committed_offsets,
    create_topic,
    end_offsets,
    form,
    produce_forms,
    read_lines,
    unique_topic,
    wait_for,
)
from tests.test_runtime_outage import _kill, _produce_patiently

STRATEGY = "cooperative-sticky"
#: the broker's group.min.session.timeout.ms: the shortest session a member may have
SESSION_MS = 6000
RUNS = 60
#: what a member logs when a store's fences refuse its write (projector, audit)
REFUSED = ("the store refused a write", "refused by the store")
#: what the runner logs once SIGTERM asked it to stop (its revokes after that are the close's)
STOPPING = "signal 15, stopping"
#: the outcomes of a revoke the runner logs: its commit sent, or none while waiting out a failure
SENT = "commit sent"
WAITING = "not committed: stopping or waiting out a failure"

Partition = tuple[str, int]
Line = tuple[str, int, int]

_CHANGE = re.compile(r"runtrail\.runtime\.runner: \S+ (assigned|revoked|lost) (.*?)(?: \((.*)\))?$")
_PART = re.compile(r"(\S+)\[(\d+)\]")


def _env(state: Path | None = None) -> dict[str, str]:
    env = {
        "RUNTRAIL_ASSIGNMENT_STRATEGY": STRATEGY,
        "RUNTRAIL_KAFKA_OPTIONS": json.dumps({"session.timeout.ms": str(SESSION_MS)}),
        "RUNTRAIL_BATCH_SIZE": "200",
    }
    if state is not None:
        env["RUNTRAIL_STATE_DIR"] = str(state)
    return env


def _options(service: str, tmp_path: Path, i: int) -> dict[str, str]:
    if service == "noop":
        return {"output": str(tmp_path / f"noop-{i}.out")}
    if service == "projector":
        return {"store_url": sqlite_url(tmp_path / "projection.db")}
    return {
        "store_url": sqlite_url(tmp_path / "audit.db"),
        "publish": "false",
        "tree_head_interval_s": "0",
    }


def changes(log: Path, *, until_stop: bool = False) -> list[tuple[str, set[Partition], str]]:
    """A member's assignment changes by its log, in order: (assigned|revoked|lost, partitions,
    outcome); ``until_stop``: only those before it was asked to stop."""
    found = []
    for line in log_text(log).splitlines():
        if until_stop and STOPPING in line:
            break
        match = _CHANGE.search(line)
        if match:
            parts = {(t, int(p)) for t, p in _PART.findall(match.group(2))}
            found.append((match.group(1), parts, match.group(3) or ""))
    return found


def holding(log: Path) -> set[Partition]:
    """What a member holds now, by its log."""
    held: set[Partition] = set()
    for kind, parts, _ in changes(log):
        held = held | parts if kind == "assigned" else held - parts
    return held


def lost(log: Path) -> set[Partition]:
    return {p for kind, parts, _ in changes(log) if kind == "lost" for p in parts}


def noop_lines(path: Path) -> list[Line]:
    """noop's output: (eventId, partition, offset) per line."""
    out = []
    for line in read_lines(path):
        event_id, partition, offset = line.split(" ")
        out.append((event_id, int(partition), int(offset)))
    return out


def assert_in_order_once(outputs: dict[str, list[Line]]) -> None:
    """Each process wrote each partition's offsets in increasing order, none twice."""
    for name, lines in outputs.items():
        by_partition: dict[int, list[int]] = defaultdict(list)
        for _, p, o in lines:
            by_partition[p].append(o)
        for p, offsets in by_partition.items():
            assert offsets == sorted(set(offsets)), f"{name}: partition {p} out of order or doubled"


def _round(k: int) -> list[dict[str, Any]]:
    """The next five sequences of every run (300 events), runs interleaved."""
    return [form(run_id=f"run-{r}", sequence=k * 5 + i + 1) for i in range(5) for r in range(RUNS)]


def _run_counts(forms: list[dict[str, Any]]) -> Counter[str]:
    return Counter(str(f["runId"]) for f in forms)


def assert_projected(db: Path, produced: Counter[str]) -> None:
    store = open_store(PROJECTIONS, sqlite_url(db))
    try:
        assert store.list(halted=True) == []
        for run, count in produced.items():
            row = store.get("t1", run)
            assert row is not None and row.state is not None and not row.halted, run
            assert row.state.version == count, run
    finally:
        store.close()


def assert_chains(db: Path, produced: Counter[str]) -> None:
    store = open_store(AUDIT_LINKS, sqlite_url(db))
    try:
        for run, count in produced.items():
            chain = store.load_chain("t1", run)
            assert [int(link.event["sequence"]) for link in chain] == list(range(1, count + 1)), run
            assert verify_stored(store, "t1", run).valid, run
    finally:
        store.close()


def projection_outcomes(proc: ServiceProcess) -> dict[str, float]:
    text = scrape(proc)
    return {
        o: metric(text, "runtrail_projection_events_total", outcome=o)
        for o in ("applied", "duplicate", "halted", "skipped")
    }


# --- a member SIGKILLed ---------------------------------------------------------------------
@pytest.mark.kafka
@pytest.mark.slow
def test_a_member_sigkilled_under_load_with_cooperative_assignment_loses_and_doubles_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    partitions = 6  # two each for three members
    topic = create_topic(kafka_bootstrap, unique_topic("coop-kill"), partitions=partitions)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=partitions)
    group = f"g-{topic}"
    logs = [tmp_path / f"noop-{i}.log" for i in range(4)]
    members: list[ServiceProcess] = []

    def member(i: int) -> ServiceProcess:
        members.append(
            ServiceProcess(
                "noop",
                kafka_bootstrap,
                topic,
                group=group,
                options=_options("noop", tmp_path, i),
                env=_env(tmp_path / f"state-{i}"),
                log_path=logs[i],
            )
        )
        return members[-1]

    def processed(i: int) -> float:
        return members[i].processed() if members[i].alive() else 0.0

    try:
        with SteadyStream(kafka_bootstrap, topic, _round, "runId", rounds=5) as stream:
            for i in range(3):
                member(i)
            wait_for(
                lambda: [len(holding(log)) for log in logs[:3]] == [2, 2, 2],
                60,
                0.1,
                what="three members holding two partitions each",
            )
            assert assignor(kafka_bootstrap, group) == STRATEGY
            kept = {i: holding(logs[i]) for i in (0, 2)}
            seen = {i: len(changes(logs[i])) for i in (0, 2)}
            victim = members[1]
            wait_for(lambda: processed(1) > 0, 30, 0.05, what="the victim processing")
            before = processed(1)
            wait_for(lambda: processed(1) > before, 30, 0.02, what="the victim busy")
            time.sleep(random.uniform(0, 0.2))
            victim.kill()
            theirs = holding(logs[1])
            commit = committed_offsets(kafka_bootstrap, group, topic, partitions)
            wait_for(
                lambda: theirs <= holding(logs[0]) | holding(logs[2]),
                4 * SESSION_MS / 1000,
                0.1,
                what="the killed member's partitions assigned to the survivors",
            )
            for i in (0, 2):  # incremental: each survivor kept its own partitions
                since = changes(logs[i])[seen[i] :]
                assert holding(logs[i]) >= kept[i], (i, since)
                assert all(kind == "assigned" for kind, _, _ in since), (i, since)
            member(3)
            wait_for(lambda: holding(logs[3]), 60, 0.1, what="the restarted member assigned")
            stream.stop()
        produced = stream.produced
        end = end_offsets(kafka_bootstrap, topic, partitions)
        live = (0, 2, 3)
        outs = [tmp_path / f"noop-{i}.out" for i in range(4)]
        expected = produced.total()

        def written() -> int:
            return len({e for out in outs for e, _, _ in noop_lines(out)})

        wait_for(lambda: written() >= expected, 120, 0.2, what="every event in an output")
        wait_for(
            lambda: committed_offsets(kafka_bootstrap, group, topic, partitions) == end,
            60,
            what="everything committed",
        )
        for i in live:
            assert members[i].terminate() == 0
    finally:
        for m in members:
            m.close()
    # nobody lost a partition: the survivors' revokes (to the restarted member) were clean
    for i in live:
        for kind, _, outcome in changes(logs[i], until_stop=True):
            assert kind != "lost", i
            assert kind != "revoked" or outcome == SENT, (i, outcome)
    found = outages(logs)
    assert not found, found
    lines = {f"noop-{i}": noop_lines(out) for i, out in enumerate(outs)}
    every = [line for got in lines.values() for line in got]
    assert len({e for e, _, _ in every}) == produced.total()  # nothing lost
    assert_in_order_once(lines)
    # twice only where the killed member wrote and had not committed
    copies = Counter((p, o) for _, p, o in every)
    by_victim = {(p, o) for _, p, o in lines["noop-1"]}
    allowed = {(p, o) for p, o in by_victim if (topic, p) in theirs and o >= commit[p]}
    doubled = {po for po, count in copies.items() if count > 1}
    assert doubled <= allowed, sorted(doubled - allowed)[:20]
    assert max(copies.values()) <= 2


# --- the broker SIGKILLed past the session timeout --------------------------------------------
SERVICES = ("noop", "projector", "audit")


@pytest.mark.slow
def test_broker_sigkilled_past_the_session_with_cooperative_assignment_members_rejoin(
    restartable_broker: LocalBroker, tmp_path: Path
) -> None:
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    partitions = 4  # two each for two members
    topic = create_topic(bootstrap, unique_topic("coop-outage"), partitions=partitions)
    create_topic(bootstrap, f"{topic}.dlq", partitions=partitions)
    before = [f for k in range(8) for f in _round(k)]
    during = [f for k in range(8, 16) for f in _round(k)]
    after = [f for k in range(16, 20) for f in _round(k)]
    produce_forms(bootstrap, topic, before)
    names = [f"{s}-{i}" for s in SERVICES for i in range(2)]
    procs = {
        f"{s}-{i}": ServiceProcess(
            s,
            bootstrap,
            topic,
            group=f"{s}-{topic}",
            options=_options(s, tmp_path, i),
            env=_env(tmp_path / f"state-{s}-{i}"),
            log_path=tmp_path / f"{s}-{i}.log",
        )
        for s in SERVICES
        for i in range(2)
    }
    log_of: Callable[[str], Path] = lambda n: tmp_path / f"{n}.log"  # noqa: E731

    def tails() -> str:
        return "\n".join(f"--- {n}\n{log_text(log_of(n))[-1500:]}" for n in names)

    def status(n: str) -> int:
        return procs[n].get("/readyz")[0]

    def balanced() -> bool:
        return all(len(holding(log_of(n))) == 2 for n in names)

    outs = {n: tmp_path / f"{n}.out" for n in names if n.startswith("noop")}
    try:
        pids = {n: p.proc.pid for n, p in procs.items()}
        wait_for(balanced, 90, 0.2, what="two partitions held by each member")
        for n in names:
            wait_for(lambda n=n: status(n) == 200, 60, what=f"{n} ready")
        publisher = threading.Thread(
            target=_produce_patiently, args=(bootstrap, topic, during, False), daemon=True
        )
        publisher.start()
        time.sleep(1.0)
        held = {n: holding(log_of(n)) for n in names}
        commit = committed_offsets(bootstrap, f"noop-{topic}", topic, partitions)
        _kill(broker)
        for n in names:
            wait_for(lambda n=n: status(n) == 503, 40, what=f"503 from {n}")
        # past the session timeout: every member's client gave its partitions up as lost
        wait_for(
            lambda: all(lost(log_of(n)) for n in names),
            3 * SESSION_MS / 1000,
            0.2,
            what="every member's assignment lost",
        )
        assert all(p.alive() for p in procs.values()), tails()
        written = {n: set(noop_lines(out)) for n, out in outs.items()}
        broker.start()
        publisher.join(300)
        # every member back in its group, holding partitions again (the second rebalance of an
        # incremental assignment done), then more events
        wait_for(balanced, 120, 0.2, what="every member holding two partitions again")
        produce_forms(bootstrap, topic, after)
        events = before + during + after
        expected = {str(f["eventId"]) for f in events}
        end = end_offsets(bootstrap, topic, partitions)

        def noop_ids() -> set[str]:
            return {e for out in outs.values() for e, _, _ in noop_lines(out)}

        wait_for(lambda: noop_ids() >= expected, 120, 0.5, what="every event in noop's output")
        wait_for(
            lambda: committed_offsets(bootstrap, f"noop-{topic}", topic, partitions) == end,
            60,
            what="noop committed everything",
        )
        db = tmp_path / "projection.db"
        wait_for(lambda: stored_offsets(db, topic, partitions) == end, 120, what="projector")
        audit = open_store(AUDIT_LINKS, sqlite_url(tmp_path / "audit.db"))
        try:
            wait_for(
                lambda: audit.stored_offsets(topic, range(partitions)) == end, 120, what="audit"
            )
        finally:
            audit.close()
        for n in names:
            wait_for(lambda n=n: status(n) == 200, 60, what=f"{n} ready again")
        assert {n: p.proc.pid for n, p in procs.items() if p.alive()} == pids, tails()
        outcomes = {n: projection_outcomes(procs[n]) for n in names if n.startswith("projector")}
        for proc in procs.values():
            assert proc.terminate() == 0
    finally:
        for proc in procs.values():
            proc.close()
    # each member took the lost path for the whole assignment it held, committing nothing; a
    # revoke of the incremental rebalance after the outage sent its commit, or (the member still
    # waiting out the outage, paused: at least once) none
    for n in names:
        found = changes(log_of(n), until_stop=True)
        losses = [parts for kind, parts, _ in found if kind == "lost"]
        assert losses and losses[0] == held[n], (n, found)
        for kind, _, outcome in found:
            assert kind != "lost" or outcome == "not committed", (n, found)
            assert kind != "revoked" or outcome in (SENT, WAITING), (n, outcome)
    refused = [
        line
        for n in names
        for line in log_text(log_of(n)).splitlines()
        if any(mark in line for mark in REFUSED)
    ]
    assert not refused, refused  # the outage itself is waited out: only the stores' fences count
    lines = {n: noop_lines(out) for n, out in outs.items()}
    every = [line for got in lines.values() for line in got]
    assert {e for e, _, _ in every} == expected
    assert_in_order_once(lines)
    # twice only: written by a member before it lost the partition (not committed), and read
    # again by the other member, which the group gave it to
    copies = Counter((p, o) for _, p, o in every)
    doubled = {po for po, count in copies.items() if count > 1}
    allowed = {
        (p, o)
        for n, got in written.items()
        for _, p, o in got
        if (topic, p) in held[n] and o >= commit[p]
    }
    assert doubled <= allowed, sorted(doubled - allowed)[:20]
    assert max(copies.values()) <= 2
    per_run = _run_counts(events)
    assert_projected(tmp_path / "projection.db", per_run)
    assert all(o["duplicate"] == o["halted"] == o["skipped"] == 0 for o in outcomes.values()), (
        outcomes
    )
    assert_chains(tmp_path / "audit.db", per_run)
