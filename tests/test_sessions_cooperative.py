"""Sessions members joining and leaving under load with incremental ``cooperative-sticky``
assignment, on the real broker, one session store.

A member keeps its other partitions through each rebalance and gives up only those that move;
it saves the sessions of those before it lets them go, and the next owner restores them from
the store. After three members came and went, every session's stored snapshot must hold each
of its events (its revision is their count; the members save after every event), and no member may have taken a rebalance for an
outage (a commit refused while the group rebalances).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail_services.sessions.settings import default_store_url
from tests.scale_support import SteadyStream, hand_over, outages
from tests.sessions_support import session_forms
from tests.support import ServiceProcess, create_topic, unique_topic, wait_for

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

    def log_of(i: int) -> Path:
        return tmp_path / f"sessions-{i}.log"

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
            log_path=log_of(i),
        )

    store = open_store(SESSION_SNAPSHOTS, default_store_url(state))

    def revisions(sessions: list[str]) -> dict[str, int]:
        found = {}
        for session in sessions:
            snapshot = store.load("t1", session)
            found[session] = snapshot.revision if snapshot is not None else 0
        return found

    members: list[ServiceProcess] = []
    try:
        with SteadyStream(kafka_bootstrap, topic, _round, "sessionId") as stream:
            members = hand_over(member, log_of)
            stream.stop()
        produced = dict(stream.produced)
        wait_for(lambda: revisions(list(produced)) == produced, 120, what="every event saved")
        assert members[-1].terminate() == 0
        assert revisions(list(produced)) == produced
    finally:
        for m in members:
            m.close()
        store.close()
    found = outages(map(log_of, range(len(members))))
    assert not found, found
