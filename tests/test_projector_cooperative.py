"""Projector members joining and leaving under load with incremental ``cooperative-sticky``
assignment, on the real broker, one SQLite projection store.

A member keeps its other partitions through each rebalance and gives up only those that move:
the runtime flushes before the revoke, which writes the partition's projections *and* its next
offset in one store transaction, and the next owner starts each partition it gains at the
offset stored there (not the group's commit). After three members came and went, every run's
projection must hold each of its events once and in order: its version is its event count
(a doubled event is a no-op ``duplicate``, a skipped or misordered one halts the run with
``missing-events``), its last event is the run's last, no run halted, no member applied an event
twice, none had a write fenced off by the store, and none took a rebalance for an outage (a
commit refused while the group rebalances).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.persistence.urls import sqlite_url
from tests.projector_support import metric, scrape
from tests.scale_support import SteadyStream, assignor, hand_over, outages
from tests.support import ServiceProcess, create_topic, form, unique_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
RUNS = 40
PER_ROUND = 24
#: commits as often as there is something new: one is nearly always in flight while the group
#: rebalances, so the refusal the test is about comes in nearly every run
COMMIT_INTERVAL_MS = "20"
STRATEGY = "cooperative-sticky"
#: what a member logs when the store's fences refuse its write (its view was stale)
FENCED = "the store refused a write"


def _event_id(run: str, sequence: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"projector-coop/{run}/{sequence}"))


def _round(k: int) -> list[dict[str, Any]]:
    """The next 24 sequences of every run (960 runtime events), runs interleaved."""
    out = []
    for i in range(PER_ROUND):
        for r in range(RUNS):
            sequence = k * PER_ROUND + i + 1
            run = f"run-{r}"
            out.append(form(run_id=run, sequence=sequence, eventId=_event_id(run, sequence)))
    return out


def test_projector_members_join_and_leave_with_cooperative_assignment_and_apply_each_event_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("proj-coop"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    store_url = sqlite_url(tmp_path / "projection.db")
    group = f"g-{events}"

    def log_of(i: int) -> Path:
        return tmp_path / f"projector-{i}.log"

    def member(i: int) -> ServiceProcess:
        return ServiceProcess(
            "projector",
            kafka_bootstrap,
            events,
            group=group,
            options={"store_url": store_url},
            env={
                "RUNTRAIL_ASSIGNMENT_STRATEGY": STRATEGY,
                "RUNTRAIL_STATE_DIR": str(tmp_path / f"state-{i}"),
                "RUNTRAIL_COMMIT_INTERVAL_MS": COMMIT_INTERVAL_MS,
            },
            log_path=log_of(i),
        )

    #: per member, its events by outcome (applied, duplicate, halted, skipped), read just
    #: before it leaves
    outcomes: dict[int, dict[str, float]] = {}
    agreed: list[str] = []

    def read_outcomes(i: int, proc: ServiceProcess) -> None:
        text = scrape(proc)
        outcomes[i] = {
            o: metric(text, "runtrail_projection_events_total", outcome=o)
            for o in ("applied", "duplicate", "halted", "skipped")
        }

    def leaving(i: int, proc: ServiceProcess) -> None:
        if not agreed:  # two members in the group: what did they agree on?
            agreed.append(assignor(kafka_bootstrap, group))
        read_outcomes(i, proc)

    store = open_store(PROJECTIONS, store_url)

    def versions() -> dict[str, int]:
        found = {}
        for r in range(RUNS):
            row = store.get("t1", f"run-{r}")
            found[f"run-{r}"] = row.version if row is not None else 0
        return found

    members: list[ServiceProcess] = []
    try:
        with SteadyStream(kafka_bootstrap, events, _round, "runId") as stream:
            members = hand_over(member, log_of, leaving=leaving)
            stream.stop()
        produced = dict(stream.produced)
        wait_for(lambda: versions() == produced, 120, what="every event projected")
        read_outcomes(len(members) - 1, members[-1])
        assert members[-1].terminate() == 0
        assert agreed == [STRATEGY]
        assert store.list(halted=True) == []
        for r in range(RUNS):
            run = f"run-{r}"
            row = store.get("t1", run)
            assert row is not None and row.state is not None and not row.halted, run
            assert row.state.version == produced[run], run
            assert row.state.last_event_id == _event_id(run, produced[run]), run
    finally:
        for m in members:
            m.close()
        store.close()
    # no event applied twice, by one member or two: an event read again is either a duplicate
    # (the store has it) or applied again (the owner before left without writing it, as one
    # that took a refused commit for an outage does); a clean hand-over re-reads nothing, the
    # next owner starts at the offset stored with the projections. A leaving member was read
    # just before it left: what it applied after that is not counted (hence <=).
    assert len(outcomes) == len(members)
    assert 0 < sum(o["applied"] for o in outcomes.values()) <= sum(produced.values()), outcomes
    assert all(o["duplicate"] == o["halted"] == o["skipped"] == 0 for o in outcomes.values()), (
        outcomes
    )
    found = outages(map(log_of, range(len(members))), FENCED)
    assert not found, found
