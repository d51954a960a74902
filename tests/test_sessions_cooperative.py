"""Sessions members joining and leaving under load with incremental ``cooperative-sticky``
assignment, on the real broker, one session store.

A member keeps its other partitions through each rebalance and gives up only those that move;
it saves the sessions of those before it lets them go, and the next owner restores them from
the store. After three members came and went, every session's stored snapshot must hold each
of its events (its revision is their count; the members save after every event), and no member may have taken a rebalance for an
outage (a commit refused while the group rebalances).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail_services.sessions.settings import default_store_url
from tests.sessions_support import session_forms
from tests.support import ServiceProcess, create_topic, produce_forms, unique_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
SESSIONS = 20
STRATEGY = "cooperative-sticky"


def _round(k: int) -> list[dict[str, Any]]:
    """Events 10k to 10k+9 of every session, each session's runs its own."""
    forms = []
    for s in range(SESSIONS):
        for f in session_forms((k + 1) * 10, start=k * 10, session=f"s{s}"):
            f["runId"] = f["correlationId"] = f"s{s}-{f['runId']}"
            forms.append(f)
    return forms


def test_sessions_members_join_and_leave_with_cooperative_assignment_and_save_every_event(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("sess-coop"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    pointers = create_topic(
        kafka_bootstrap, f"{topic}.sessions", partitions=2, **{"cleanup.policy": "compact"}
    )
    state = tmp_path / "state"
    produced: Counter[str] = Counter()
    scaled_in = threading.Event()

    def produce_until_scaled_in() -> None:
        k = 0
        while not scaled_in.is_set() or k < 20:
            batch = _round(k)
            produce_forms(kafka_bootstrap, topic, batch)
            produced.update(f["sessionId"] for f in batch)
            k += 1
            time.sleep(0.3)

    def member(i: int) -> ServiceProcess:
        return ServiceProcess(
            "sessions",
            kafka_bootstrap,
            topic,
            group=f"g-{topic}",
            # a save after every event: the store shows when everything was applied
            options={"http_port": "0", "every_n_events": "1"},
            env={
                "RUNTRAIL_ASSIGNMENT_STRATEGY": STRATEGY,
                "RUNTRAIL_STATE_DIR": str(state),
                "RUNTRAIL_SESSIONS_TOPIC": pointers,
            },
            log_path=tmp_path / f"sessions-{i}.log",
        )

    def log(i: int) -> str:
        path = tmp_path / f"sessions-{i}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    store = open_store(SESSION_SNAPSHOTS, default_store_url(state))

    def revisions() -> dict[str, int]:
        found = {}
        for session in list(produced):
            snapshot = store.load("t1", session)
            found[session] = snapshot.revision if snapshot is not None else 0
        return found

    producer = threading.Thread(target=produce_until_scaled_in)
    producer.start()
    members: list[ServiceProcess] = []
    try:
        for i in range(3):
            members.append(member(i))
            wait_for(lambda i=i: "assigned" in log(i), 60, what=f"member {i} assigned")
            time.sleep(2)
            if i:
                assert members[i - 1].terminate() == 0
        scaled_in.set()
        producer.join(120)
        assert not producer.is_alive()
        wait_for(lambda: revisions() == dict(produced), 120, what="every event saved")
        assert members[2].terminate() == 0
        assert revisions() == dict(produced)
    finally:
        scaled_in.set()
        producer.join(5)
        for m in members:
            m.close()
        store.close()
    outages = [
        line
        for i in range(3)
        for line in log(i).splitlines()
        if "pausing consumption and retrying" in line
    ]
    assert not outages, outages
