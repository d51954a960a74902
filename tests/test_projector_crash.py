"""SIGKILL the projector at random points while events flow; the restarted service must end
with exactly the projections of an uninterrupted run (rows and offsets move together, so a
kill can neither lose an event nor apply one twice), and every halt must be dead-lettered.

The workload is the benchmark's (runs of model, tool and domain events) plus runs with an
invalid transition in the middle. The killed members use static group membership so each is
replaced at once instead of after its session timeout: the test exercises the store's offsets,
not the group coordinator's patience.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench.workload import workload
from runtrail.projection import compare_projections
from runtrail.runtime.deadletter import H_OFFSET, H_PARTITION
from tests.projection_support import Run
from tests.projector_support import (
    Form,
    forms,
    projection_at,
    projector,
    stored_offsets,
    wait_caught_up,
)
from tests.support import consume_all, create_topic, produce_forms, unique_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
PARTITIONS = 4
KILLS = 6


def _broken(i: int) -> list[Form]:
    r = Run(f"broken-{i}", "bench")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id="t", step=1)
    r.add("run.approval_granted", {"actionDigest": "d", "approvedBy": "op"})  # nothing pending
    r.add("STEP_END", {"reason": "end_turn"}, turn_id="t", step=1)
    return forms(r)


def _stream(rng: random.Random) -> list[Form]:
    events: list[Form] = list(workload(12_000, seed=11))
    for i in range(6):
        at = sorted(rng.sample(range(len(events)), 4))
        for offset, form in zip(reversed(at), reversed(_broken(i)), strict=True):
            events.insert(offset, form)
    return events


def _progress(db: Path, topic: str) -> int:
    return sum(stored_offsets(db, topic, PARTITIONS).values())


def test_sigkill_at_random_points_then_restart_equals_an_uninterrupted_run(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("proj-kill"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    rng = random.Random(2026)
    events = _stream(rng)

    def produce_slowly() -> None:
        for i in range(0, len(events), 800):
            produce_forms(kafka_bootstrap, topic, events[i : i + 800])
            time.sleep(0.4)

    producer = threading.Thread(target=produce_slowly)
    producer.start()
    db = tmp_path / "killed.db"
    static: dict[str, Any] = {"group.instance.id": f"projector-{topic}"}
    env = {"RUNTRAIL_BATCH_SIZE": "300", "RUNTRAIL_KAFKA_OPTIONS": json.dumps(static)}
    kills = 0
    try:
        for _ in range(KILLS):
            before = _progress(db, topic)
            proc = projector(kafka_bootstrap, topic, db, tmp_path / "svc.log", env=env)
            try:
                # progress, or nothing left to make: the stream is all produced and consumed
                wait_for(
                    lambda b=before: (
                        _progress(db, topic) > b
                        or (not producer.is_alive() and _progress(db, topic) == len(events))
                    ),
                    60,
                    0.05,
                    what="progress",
                )
                time.sleep(rng.uniform(0.0, 0.7))
                proc.kill()
                kills += 1
            finally:
                proc.close()
        producer.join(120)
        # the last one leaves cleanly, so it joins as a dynamic member (closing a static member
        # raises _DESTROY from the runtime's revoke callback in this librdkafka)
        final = projector(kafka_bootstrap, topic, db, tmp_path / "svc.log")
        try:
            wait_caught_up(kafka_bootstrap, db, topic, PARTITIONS)
            assert final.terminate() == 0
        finally:
            final.close()
    finally:
        producer.join(10)
    assert kills == KILLS
    reference = tmp_path / "reference.db"
    create_topic(kafka_bootstrap, f"{topic}.ref-dlq", partitions=1)
    calm = projector(
        kafka_bootstrap,
        topic,
        reference,
        tmp_path / "ref.log",
        group=f"ref-{topic}",
        env={"RUNTRAIL_DLQ_TOPIC": f"{topic}.ref-dlq"},
    )
    try:
        wait_caught_up(kafka_bootstrap, reference, topic, PARTITIONS)
        assert calm.terminate() == 0
    finally:
        calm.close()
    with projection_at(db) as killed, projection_at(reference) as uninterrupted:
        assert compare_projections(killed, uninterrupted) == []
        halted = {r.run_id: r.halt_coordinates for r in uninterrupted.list(halted=True)}
        assert sorted(halted) == [f"broken-{i}" for i in range(6)]
        runs = {r.run_id for r in uninterrupted.list()}
    assert len(runs) == len({(e["tenantId"], e["runId"]) for e in events})
    # every halt reached the dead-letter topic, at least once (a kill may repeat one)
    dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=1000, timeout=15)
    sent = {(int(dict(m.headers())[H_PARTITION]), int(dict(m.headers())[H_OFFSET])) for m in dead}
    assert {(c.partition, c.offset) for c in halted.values() if c is not None} <= sent
