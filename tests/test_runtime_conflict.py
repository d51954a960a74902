"""Conflicting writers: a second writer reusing sequences 5-8 of a run.

Every service gets the same decision from the runtime: the four reused sequences are
dead-lettered as ``sequence-conflict`` with both eventIds in the headers, and no store holds
them. Audit, whose store keeps the run's chain, reaches the same decision after a restart,
when the runtime no longer remembers the first writer's events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.runtime.deadletter import H_REASON, H_SERVICE
from runtrail.runtime.decoding import H_CONFLICT_EVENT, H_CONFLICT_FIRST
from tests.projector_support import sqlite_url, stored_offsets
from tests.support import (
    ServiceProcess,
    consume_all,
    create_topic,
    end_offsets,
    form,
    produce_forms,
    read_lines,
    unique_topic,
    wait_for,
)

pytestmark = pytest.mark.kafka
PARTITIONS = 3
RUN = "run-two-writers"


def _writer_a(first: int, last: int) -> list[dict[str, Any]]:
    out = []
    for seq in range(first, last + 1):
        if seq == 1:
            data: dict[str, Any] = {"goalRef": "goal://1", "policyVersion": "p-1"}
            out.append(form("run.accepted", run_id=RUN, sequence=1, data=data, eventId=f"a-{seq}"))
        else:
            out.append(form(run_id=RUN, sequence=seq, eventId=f"a-{seq}"))
    return out


def _writer_b() -> list[dict[str, Any]]:
    return [
        form(run_id=RUN, sequence=seq, eventId=f"b-{seq}", data={"message": "other", "raw": None})
        for seq in range(5, 9)
    ]


def _conflicts(bootstrap: str, topic: str, service: str, expect: int) -> dict[str, str]:
    """Conflict dead letters of ``service``: conflicting eventId -> first eventId."""
    dead = consume_all(bootstrap, f"{topic}.dlq", expect=expect, timeout=60)
    out = {}
    for msg in dead:
        headers = dict(msg.headers())
        if headers[H_SERVICE] != service.encode():
            continue
        assert headers[H_REASON] == b"sequence-conflict"
        out[headers[H_CONFLICT_EVENT].decode()] = headers[H_CONFLICT_FIRST].decode()
    return out


def _audit_chain(url: str) -> list[str]:
    store = open_store(AUDIT_LINKS, url)
    try:
        return [str(link.event["eventId"]) for link in store.load_chain("t1", RUN)]
    finally:
        store.close()


def _audit_at(url: str, db: Path, topic: str, end: dict[int, int]) -> bool:
    if not db.exists():
        return False
    store = open_store(AUDIT_LINKS, url)
    try:
        return _reached(store.stored_offsets(topic, range(PARTITIONS)), end)
    finally:
        store.close()


def _reached(stored: dict[int, int], end: dict[int, int]) -> bool:
    return all(stored.get(p, 0) >= o for p, o in end.items() if o)


EXPECTED_CONFLICTS = {f"b-{s}": f"a-{s}" for s in range(5, 9)}
FIRST_WRITER = [f"a-{s}" for s in range(1, 12)]


def test_a_second_writer_reusing_sequences_is_dead_lettered_alike_by_every_service(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("conflict"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    produce_forms(kafka_bootstrap, topic, [*_writer_a(1, 10), *_writer_b(), *_writer_a(11, 11)])
    end = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    out = tmp_path / "noop.out"
    projection_db, audit_db = tmp_path / "projection.db", tmp_path / "audit.db"
    audit_url = sqlite_url(audit_db)
    procs = [
        ServiceProcess(
            "noop",
            kafka_bootstrap,
            topic,
            group=f"noop-{topic}",
            options={"output": str(out)},
            log_path=tmp_path / "noop.log",
        ),
        ServiceProcess(
            "projector",
            kafka_bootstrap,
            topic,
            group=f"projector-{topic}",
            options={"store_url": sqlite_url(projection_db)},
            log_path=tmp_path / "projector.log",
        ),
        ServiceProcess(
            "audit",
            kafka_bootstrap,
            topic,
            group=f"audit-{topic}",
            options={"store_url": audit_url, "publish": "false", "tree_head_interval_s": "0"},
            log_path=tmp_path / "audit.log",
        ),
    ]
    try:
        wait_for(lambda: len(read_lines(out)) >= 11, 60, what="noop")
        wait_for(
            lambda: _reached(stored_offsets(projection_db, topic, PARTITIONS), end),
            60,
            what="projector",
        )
        wait_for(lambda: _audit_at(audit_url, audit_db, topic, end), 60, what="audit")
        for name in ("noop", "projector", "audit"):
            assert _conflicts(kafka_bootstrap, topic, name, expect=12) == EXPECTED_CONFLICTS, name
        for proc in procs:
            assert proc.terminate() == 0
    finally:
        for proc in procs:
            proc.close()
    # the stores agree: the first writer's eleven events, none of the second's
    assert [line.split(" ")[0] for line in read_lines(out)] == FIRST_WRITER
    assert _audit_chain(audit_url) == FIRST_WRITER
    store = open_store(PROJECTIONS, sqlite_url(projection_db))
    try:
        stored = store.get("t1", RUN)
        assert stored is not None and stored.version == 11 and not stored.halted
        assert stored.state is not None and stored.state.last_event_id == "a-11"
    finally:
        store.close()


def test_audit_decides_a_conflict_from_its_store_after_a_restart(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("conflict-restart"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    audit_db = tmp_path / "audit.db"
    url = sqlite_url(audit_db)

    def audit() -> ServiceProcess:
        return ServiceProcess(
            "audit",
            kafka_bootstrap,
            topic,
            group=f"audit-{topic}",
            options={"store_url": url, "publish": "false", "tree_head_interval_s": "0"},
            log_path=tmp_path / "audit.log",
        )

    produce_forms(kafka_bootstrap, topic, _writer_a(1, 10))
    first = audit()
    try:
        end = end_offsets(kafka_bootstrap, topic, PARTITIONS)
        wait_for(lambda: _audit_at(url, audit_db, topic, end), 60, what="the first writer sealed")
        assert first.terminate() == 0
    finally:
        first.close()
    # the second writer after the restart: the runtime has not seen sequences 5-8 in this process
    produce_forms(kafka_bootstrap, topic, [*_writer_b(), *_writer_a(11, 11)])
    second = audit()
    try:
        end = end_offsets(kafka_bootstrap, topic, PARTITIONS)
        wait_for(lambda: _audit_at(url, audit_db, topic, end), 60, what="the rest sealed")
        assert _conflicts(kafka_bootstrap, topic, "audit", expect=4) == EXPECTED_CONFLICTS
        assert second.terminate() == 0
    finally:
        second.close()
    assert _audit_chain(url) == FIRST_WRITER
