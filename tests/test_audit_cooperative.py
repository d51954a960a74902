"""Audit members joining and leaving under load with incremental ``cooperative-sticky``
assignment, on the real broker, one SQLite store.

A member keeps its other partitions through each rebalance and gives up only those that move
(``on_revoked`` with some of them); the store holds each partition's sealed position in the
links' transaction, so the next owner starts where it says. After three members came and went,
every run's chain must hold each of its events once, in sequence order, and verify; no member
may have taken a rebalance for an outage (a commit refused while the group rebalances).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.audit import verify_stored
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from tests.scale_support import SteadyStream, hand_over, outages
from tests.support import ServiceProcess, create_topic, form, unique_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
RUNS = 40
STRATEGY = "cooperative-sticky"


def _round(k: int) -> list[dict[str, Any]]:
    """The next twelve sequences of every run (480 events)."""
    return [
        form(run_id=f"run-{r}", sequence=k * 12 + i + 1) for r in range(RUNS) for i in range(12)
    ]


def test_audit_members_join_and_leave_with_cooperative_assignment_and_seal_each_event_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("audit-coop"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    store_url = sqlite_url(tmp_path / "audit.db")

    def log_of(i: int) -> Path:
        return tmp_path / f"audit-{i}.log"

    def member(i: int) -> ServiceProcess:
        return ServiceProcess(
            "audit",
            kafka_bootstrap,
            events,
            group=f"g-{events}",
            options={"store_url": store_url, "publish": "false", "tree_head_interval_s": "0"},
            env={
                "RUNTRAIL_ASSIGNMENT_STRATEGY": STRATEGY,
                "RUNTRAIL_STATE_DIR": str(tmp_path / f"state-{i}"),
            },
            log_path=log_of(i),
        )

    store = open_store(AUDIT_LINKS, store_url)

    def sealed() -> int:
        heads = store.heads_of(("t1", f"run-{r}") for r in range(RUNS))
        return sum(head.length for head in heads.values())

    members: list[ServiceProcess] = []
    try:
        with SteadyStream(kafka_bootstrap, events, _round, "runId") as stream:
            members = hand_over(member, log_of)
            stream.stop()
        produced = stream.produced
        total = sum(produced.values())
        wait_for(lambda: sealed() == total, 120, what=f"all {total} events sealed")
        assert members[-1].terminate() == 0
        for r in range(RUNS):
            run = f"run-{r}"
            chain = store.load_chain("t1", run)
            assert len(chain) == produced[run], run
            sequences = [int(link.event["sequence"]) for link in chain]
            assert sequences == list(range(1, produced[run] + 1)), run
            assert verify_stored(store, "t1", run).valid, run
    finally:
        for m in members:
            m.close()
        store.close()
    found = outages(map(log_of, range(len(members))), "refused by the store")
    assert not found, found
