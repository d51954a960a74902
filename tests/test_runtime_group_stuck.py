"""A consumer group left without its coordinator past ``group_stuck_s``: /readyz names it, and
the service replaces its Kafka client, in the same process, losing and doubling nothing.

The broker of this test is SIGKILLed for 30 s under noop (``-o output=FILE``: one fsynced line
per event, written before the commit) with ``RUNTRAIL_GROUP_STUCK_S=4`` (120 by default). While
the group has no coordinator, ``/readyz`` says so; once the session timeout took the partitions
and no commit is in flight, the runtime makes a new client (a log line,
``runtrail_kafka_client_replacements_total``). When the broker is back, that client joins and
reads on from the group's committed offsets: every event in the output once, everything
committed, ready again, the same PID. (A client that never rejoins by itself, the case this
exists for, cannot be made to order; this proves the replacement safe against the real broker.)
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from runtrail_tools.kafka.broker import LocalBroker
from tests.support import (
    ServiceProcess,
    committed_offsets,
    create_topic,
    end_offsets,
    produce_forms,
    read_lines,
    unique_topic,
    wait_for,
)
from tests.test_runtime_outage import _forms, _kill, _produce_patiently

pytestmark = pytest.mark.kafka
PARTITIONS = 3
STUCK_S = 4


def _replacements(proc: ServiceProcess) -> float:
    text = proc.get("/metrics")[1]
    match = re.search(r"^runtrail_kafka_client_replacements_total\{[^}]*\} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _names_the_group(proc: ServiceProcess, said: list[str]) -> bool:
    """``/readyz`` names the group (without its coordinator, or its client without brokers)."""
    said[0] = proc.get("/readyz")[1]
    return "consumer group unavailable: " in said[0]


def test_a_group_without_its_coordinator_gets_a_new_client_and_loses_nothing(
    restartable_broker: LocalBroker, tmp_path: Path
) -> None:
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("stuck"), partitions=PARTITIONS)
    create_topic(bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    before, during, after = _forms(2000, "a"), _forms(600, "b"), _forms(600, "c")
    produce_forms(bootstrap, topic, before)
    out, log_path = tmp_path / "noop.out", tmp_path / "noop.log"
    proc = ServiceProcess(
        "noop",
        bootstrap,
        topic,
        group=f"noop-{topic}",
        options={"output": str(out)},
        env={"RUNTRAIL_GROUP_STUCK_S": str(STUCK_S), "RUNTRAIL_BATCH_SIZE": "200"},
        log_path=log_path,
    )
    try:
        wait_for(lambda: len(read_lines(out)) >= len(before), 90, what="the first events")
        wait_for(lambda: proc.get("/readyz")[0] == 200, 60, what="readiness")
        pid = proc.proc.pid
        publisher = threading.Thread(
            target=_produce_patiently, args=(bootstrap, topic, during), daemon=True
        )
        publisher.start()
        time.sleep(1.0)
        _kill(broker)
        down_at = time.monotonic()
        said = [""]  # what /readyz said last: the failure shows it, with the log
        try:
            wait_for(lambda: _names_the_group(proc, said), 60, what="/readyz naming the group")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; /readyz said {said[0]!r}; log: {log_path.read_text()[-3000:]}"
            ) from None
        wait_for(lambda: _replacements(proc) >= 1, 40, what="the client replaced")
        assert "replacing its Kafka client: consumer group" in log_path.read_text()
        while time.monotonic() - down_at < 30:
            assert proc.alive(), log_path.read_text()[-3000:]
            assert proc.get("/healthz")[0] == 200  # the loop keeps turning
            time.sleep(1)
        broker.start()
        publisher.join(300)
        produce_forms(bootstrap, topic, after)
        expected = [str(f["eventId"]) for f in before + during + after]
        ids = lambda: [line.split(" ", 1)[0] for line in read_lines(out)]  # noqa: E731
        wait_for(lambda: set(ids()) >= set(expected), 180, what="every event in the output")
        end = end_offsets(bootstrap, topic, PARTITIONS)
        wait_for(
            lambda: committed_offsets(bootstrap, f"noop-{topic}", topic, PARTITIONS) == end,
            90,
            what="everything committed",
        )
        wait_for(lambda: proc.get("/readyz")[0] == 200, 60, what="ready again")
        assert proc.alive() and proc.proc.pid == pid
        seen = Counter(ids())
        assert set(seen) == set(expected)
        doubled = {k: c for k, c in seen.items() if c > 1}
        assert not doubled, f"{len(doubled)} events written twice"
        assert proc.terminate() == 0
    finally:
        proc.close()
