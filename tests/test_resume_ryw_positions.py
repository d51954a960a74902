"""Read-your-writes in the resume-cache service follows the positions its checkpoint reached
(issue 12 item 8): a lookup naming the offset of a message the service never sees (it was
dead-lettered) waits exactly until the consume loop is past it, and is answered at once after,
instead of running into the wait timeout."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.publisher import Publisher
from runtrail.resume import Kind, RunRecorder, Scope, tool_key
from runtrail.resume.errors import NotCaughtUp
from runtrail.resume.http_client import ServiceCacheClient
from runtrail.resume.partitioning import partition_for
from runtrail.resume.remote import Lookup
from tests.resume_support import PARTITIONS, TOKENS, CacheService, make_topics
from tests.support import end_offsets, produce

pytestmark = [pytest.mark.kafka]

RUN = "run-ryw-dlq"


@pytest.fixture
def service(kafka_bootstrap: str, tmp_path: Path) -> Iterator[CacheService]:
    events, cache = make_topics(kafka_bootstrap, prefix="rcpos")
    svc = CacheService(kafka_bootstrap, events, cache, tmp_path).start()
    try:
        yield svc
    finally:
        svc.stop()


def test_a_lookup_past_a_dead_lettered_message_waits_only_until_the_service_passed_it(
    service: CacheService, kafka_bootstrap: str
) -> None:
    publisher = Publisher(service.settings("acme"))
    recorder = RunRecorder(publisher, RUN)
    recorder.begin_step(1)
    recorder.tool_call("c1", "charge", {"amount": 5})
    publisher.flush(30)
    client = ServiceCacheClient(service.url, TOKENS["acme"], wait_ms=25_000)
    partition = partition_for(RUN, PARTITIONS)
    ask = {
        "tenant": "acme",
        "run_id": RUN,
        "kind": Kind.TOOL,
        "key": tool_key("other", {}),
        "scope": Scope.RUN,
    }
    client.run_state(tenant="acme", run_id=RUN, min_offsets=publisher.acked_offsets())

    assert service.proc is not None
    service.proc.proc.send_signal(signal.SIGSTOP)  # consumes nothing now
    try:
        produce(kafka_bootstrap, service.events_topic, [(RUN, b"\xc3\x01")])  # dead-lettered
        poison = end_offsets(kafka_bootstrap, service.events_topic, PARTITIONS)[partition] - 1
        answers: list[Lookup | Exception] = []

        def look() -> None:
            try:
                answers.append(client.lookup(**ask, min_offsets={partition: poison}))
            except NotCaughtUp as exc:
                answers.append(exc)

        waiter = threading.Thread(target=look)
        waiter.start()
        waiter.join(1.5)
        assert waiter.is_alive()  # the service is behind: the lookup waits
    finally:
        service.proc.proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    waiter.join(30)
    waited = time.monotonic() - resumed
    # a trusted miss, as soon as the consume loop passed the dead-lettered message: not a 503
    # after the 25 s wait (what it was when positions only counted delivered events)
    assert answers == [Lookup(None)], answers
    assert waited < 10, waited

    started = time.monotonic()
    assert client.lookup(**ask, min_offsets={partition: poison}) == Lookup(None)
    assert time.monotonic() - started < 1.0  # at once, now that it is past
    state = client.run_state(tenant="acme", run_id=RUN, min_offsets={partition: poison})
    assert [i.call_id for i in state.open_intents] == ["c1"]
    publisher.close()
