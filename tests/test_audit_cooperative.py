"""Audit members joining and leaving under load with incremental ``cooperative-sticky``
assignment, on the real broker, one SQLite store.

A member keeps its other partitions through each rebalance and gives up only those that move
(``on_revoked`` with some of them); the store holds each partition's sealed position in the
links' transaction, so the next owner starts where it says. After three members came and went,
every run's chain must hold each of its events once, in sequence order, and verify; no member
may have taken a rebalance for an outage (a commit refused while the group rebalances).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from runtrail.audit import verify_stored
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from tests.support import ServiceProcess, create_topic, form, produce_forms, unique_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
RUNS = 40
STRATEGY = "cooperative-sticky"


def test_audit_members_join_and_leave_with_cooperative_assignment_and_seal_each_event_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("audit-coop"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    group = f"g-{events}"
    store_url = sqlite_url(tmp_path / "audit.db")
    produced: Counter[str] = Counter()
    scaled_in = threading.Event()

    def produce_until_scaled_in() -> None:
        """500 events a round (each run's next sequences) until the last member works alone."""
        step = 0
        while not scaled_in.is_set() or step < 20:
            batch = [
                form(run_id=f"run-{r}", sequence=step * 12 + i + 1)
                for r in range(RUNS)
                for i in range(12)
            ][:500]
            produce_forms(kafka_bootstrap, events, batch)
            produced.update(f["runId"] for f in batch)
            step += 1
            time.sleep(0.3)

    def member(i: int) -> ServiceProcess:
        return ServiceProcess(
            "audit",
            kafka_bootstrap,
            events,
            group=group,
            options={"store_url": store_url, "publish": "false", "tree_head_interval_s": "0"},
            env={
                "RUNTRAIL_ASSIGNMENT_STRATEGY": STRATEGY,
                "RUNTRAIL_STATE_DIR": str(tmp_path / f"state-{i}"),
            },
            log_path=tmp_path / f"audit-{i}.log",
        )

    store = open_store(AUDIT_LINKS, store_url)

    def sealed() -> int:
        heads = store.heads_of(("t1", f"run-{r}") for r in range(RUNS))
        return sum(head.length for head in heads.values())

    producer = threading.Thread(target=produce_until_scaled_in)
    producer.start()
    members: list[ServiceProcess] = []
    try:
        members.append(member(0))
        wait_for(lambda: sealed() > 0, 60, what="the first member sealing")
        members.append(member(1))
        wait_for(lambda: "assigned" in _log(tmp_path, 1), 60, what="the second member assigned")
        time.sleep(2)
        assert members[0].terminate() == 0
        members.append(member(2))
        wait_for(lambda: "assigned" in _log(tmp_path, 2), 60, what="the third member assigned")
        time.sleep(2)
        assert members[1].terminate() == 0
        scaled_in.set()
        producer.join(120)
        assert not producer.is_alive()
        total = sum(produced.values())
        wait_for(lambda: sealed() == total, 120, what=f"all {total} events sealed")
        assert members[2].terminate() == 0
        for r in range(RUNS):
            run = f"run-{r}"
            chain = store.load_chain("t1", run)
            assert len(chain) == produced[run], run
            sequences = [int(link.event["sequence"]) for link in chain]
            assert sequences == list(range(1, produced[run] + 1)), run
            assert verify_stored(store, "t1", run).valid, run
    finally:
        scaled_in.set()
        producer.join(5)
        for m in members:
            m.close()
        store.close()
    outages = [
        line
        for i in range(3)
        for line in _log(tmp_path, i).splitlines()
        if "pausing consumption and retrying" in line or "refused by the store" in line
    ]
    assert not outages, outages


def _log(tmp_path: Path, i: int) -> str:
    path = tmp_path / f"audit-{i}.log"
    return path.read_text(errors="replace") if path.exists() else ""
