"""The resume-cache service in process: a waiting event holds its offset in the store, and a
re-read after a restart applies nothing twice (the store's last sequence is the anchor)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import Event
from runtrail.persistence.urls import sqlite_url
from runtrail.runtime import Delivered, ServiceContext
from runtrail_services.resume_cache.service import ResumeCacheService
from tests.capture_support import RunEvents, prompt
from tests.checkpoint_support import assign

TOPIC = "events"


def make(tmp_path: Path) -> ResumeCacheService:
    context = ServiceContext(
        settings=Settings(state_dir=tmp_path / "state", events_topic=TOPIC, reorder_window=100),
        options={
            "store_url": sqlite_url(tmp_path / "rc.db"),
            "http_port": "0",
            "publish_topic": "false",
            "tokens": '{"acme": "t"}',
        },
        registry=CollectorRegistry(),
    )
    return ResumeCacheService(context)


def deliver(events: list[tuple[int, Event]]) -> list[Delivered]:
    return [Delivered(e, {}, TOPIC, 0, offset, 0, e.run_id.encode()) for offset, e in events]


def consume(service: ResumeCacheService, events: list[tuple[int, Event]]) -> None:
    """A batch as the runtime hands it: process, then the positions it reached."""
    service.process(deliver(events))
    service.context.checkpoint.reached({(TOPIC, 0): events[-1][0] + 1})


def test_a_waiting_event_holds_the_stored_offset_and_a_restart_re_reads_it(tmp_path: Path) -> None:
    run = RunEvents()
    events = [
        run.request(prompt()),  # 1
        run.response("Hel"),  # 2
        run.response("lo"),  # 3
        run.response(", world"),  # 4
        run.step_end(),  # 5
    ]
    arrival = list(enumerate([events[0], events[1], events[3], events[2], events[4]]))
    first = make(tmp_path)
    first.on_assigned([(TOPIC, 0)])
    consume(first, arrival[:3])  # 1, 2, then 4 waits for 3
    first.flush()
    assert first.store.offsets(TOPIC) == {0: 2}  # not past the waiting event at offset 2
    assert first.store.run_state("acme", "run-1").last_sequence == 2
    first.close()

    second = make(tmp_path)  # the crash: the runtime seeks to the store's offsets
    starts = assign(second, [(TOPIC, 0)])
    assert starts == {(TOPIC, 0): 2}
    consume(second, arrival[2:])
    second.flush()
    [entry] = second.store.entries("acme")
    assert entry.result["message"] == "Hello, world"  # each delta once, in sequence order
    assert second.store.offsets(TOPIC) == {0: 5}
    second.close()


def test_a_re_read_of_applied_events_is_skipped(tmp_path: Path) -> None:
    run = RunEvents()
    events = [run.request(prompt()), run.response("a"), run.response("b"), run.step_end()]
    first = make(tmp_path)
    first.on_assigned([(TOPIC, 0)])
    consume(first, list(enumerate(events[:3])))
    first.flush()
    first.close()
    second = make(tmp_path)
    second.on_assigned([(TOPIC, 0)])
    consume(second, list(enumerate(events)))  # a replay from 0 (an operator rewind)
    second.flush()
    [entry] = second.store.entries("acme")
    assert entry.result["message"] == "ab"
    second.close()


def test_a_partition_lost_with_a_batch_pending_resumes_from_that_batch(tmp_path: Path) -> None:
    """An outage outlasting the session: the partition is lost while a batch waits to be
    flushed, then comes back; the pending batch is flushed once the store can take it, and
    the re-read from the store's older offset must continue the node that batch holds."""
    run = RunEvents()
    events = [run.request(prompt()), run.response("Hel"), run.response("lo"), run.step_end()]
    svc = make(tmp_path)
    svc.on_assigned([(TOPIC, 0)])
    consume(svc, list(enumerate(events[:1])))
    svc.flush()  # the store: the open request, offset 1
    consume(svc, [(1, events[1]), (2, events[2])])  # applied; its flush waits (outage)
    svc.on_revoked([(TOPIC, 0)])  # lost: the runtime forgets the partition
    starts = assign(svc, [(TOPIC, 0)])  # back, starting where the store is durable
    assert starts == {(TOPIC, 0): 1}
    svc.flush()  # the store can take writes again: the pending batch lands
    consume(svc, [(1, events[1]), (2, events[2]), (3, events[3])])  # the re-read
    svc.flush()
    [entry] = svc.store.entries("acme")
    assert entry.result["message"] == "Hello"  # each delta once, none lost
    svc.close()
