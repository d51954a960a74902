"""The audit service stores the position its checkpoint reached, not that of the last event it
sealed (issue 14 item 2): a message the runtime dead-lettered at the end of a batch (the
service never sees it) is behind the stored position, so a restarted service does not read
it again and the DLQ holds it once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtrail.audit.store import LinkStore
from runtrail.persistence.registry import open_store
from runtrail.persistence.urls import sqlite_url
from tests.support import (
    ServiceProcess,
    create_topic,
    encode,
    end_offsets,
    form,
    produce,
    unique_topic,
    wait_for,
)

pytestmark = [pytest.mark.kafka]

RUN = ("t1", "run-poison-end")
#: not an event: the runtime dead-letters it before any service sees it
POISON = b"\xc3\x01"


def _links(url: str) -> int:
    store: LinkStore = open_store("audit", url)
    try:
        return sum(h.length for h in store.heads_of([RUN]).values())
    finally:
        store.close()


def _sealed_position(url: str, topic: str) -> int | None:
    store: LinkStore = open_store("audit", url)
    try:
        return store.stored_offsets(topic, [0]).get(0)
    finally:
        store.close()


def _events(first: int, count: int) -> list[tuple[str, bytes]]:
    return [
        (RUN[1], encode(form(run_id=RUN[1], tenant=RUN[0], sequence=first + i)))
        for i in range(count)
    ]


@pytest.mark.parametrize("publish", ["true", "false"])
def test_poison_at_the_end_of_a_batch_is_dead_lettered_once_across_a_restart(
    kafka_bootstrap: str, tmp_path: Path, publish: str
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("audit-pos"), partitions=1)
    dlq = create_topic(kafka_bootstrap, f"{events}.dlq", partitions=1)
    audit = create_topic(kafka_bootstrap, unique_topic("audit-pos-out"), partitions=1)
    url = sqlite_url(tmp_path / "audit.db")

    def service() -> ServiceProcess:
        return ServiceProcess(
            "audit",
            kafka_bootstrap,
            events,
            group=f"g-{events}",
            options={"store_url": url, "publish": publish},
            env={"RUNTRAIL_AUDIT_TOPIC": audit, "RUNTRAIL_STATE_DIR": str(tmp_path / "state")},
            log_path=tmp_path / "svc.log",
        )

    produce(kafka_bootstrap, events, [*_events(1, 5), (RUN[1], POISON)])  # poison is last
    first = service()
    try:
        wait_for(lambda: _links(url) == 5, 60, what="the five events sealed")
        wait_for(lambda: end_offsets(kafka_bootstrap, dlq, 1)[0] == 1, 60, what="poison in DLQ")
        assert first.terminate() == 0, (tmp_path / "svc.log").read_text()[-3000:]
    finally:
        first.close()
    assert _sealed_position(url, events) == 6  # past the poison, which the service never saw

    again = service()
    try:
        produce(kafka_bootstrap, events, _events(6, 1))
        wait_for(lambda: _links(url) == 6, 60, what="the event after the restart sealed")
        assert again.terminate() == 0, (tmp_path / "svc.log").read_text()[-3000:]
    finally:
        again.close()
    assert end_offsets(kafka_bootstrap, dlq, 1)[0] == 1  # dead-lettered once, not again
    assert _sealed_position(url, events) == 7
