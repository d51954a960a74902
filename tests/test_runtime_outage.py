"""A broker SIGKILLed under a running service: the service keeps its PID, says 503, catches up.

The broker of this test (``restartable_broker``) is killed with SIGKILL while the ``noop``
service consumes with ``-o output=FILE`` (one fsynced line per event, written before the
commit). The service must not exit, must answer 503 on ``/readyz`` while the broker is gone,
and once the broker is back it must process everything produced before, during and after the
outage: nothing missing, nothing doubled.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from runtrail.kafka.broker import LocalBroker
from tests.support import (
    ServiceProcess,
    committed_offsets,
    create_topic,
    encode,
    end_offsets,
    form,
    produce_forms,
    read_lines,
    unique_topic,
    wait_for,
)

pytestmark = pytest.mark.kafka
PARTITIONS = 3


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _kill(broker: LocalBroker) -> None:
    pid = broker.pid
    assert pid is not None, "the broker is not running"
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: broker.pid is None, 20, what="the broker to die")


def _forms(count: int, tag: str, runs: int = 30) -> list[dict[str, object]]:
    return [form(run_id=f"{tag}-{i % runs}", sequence=i // runs + 1) for i in range(count)]


def _produce_patiently(bootstrap: str, topic: str, forms: list[dict[str, object]]) -> None:
    """Publish while the broker may be down: librdkafka holds the messages until it is back."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "message.timeout.ms": 600_000,
        }
    )
    for f in forms:
        producer.produce(topic, value=encode(f), key=str(f["runId"]))
        producer.poll(0)
        time.sleep(0.002)
    assert producer.flush(300) == 0


def _outage(restartable_broker: LocalBroker, tmp_path: Path, down_s: float) -> None:
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique_topic("outage"), partitions=PARTITIONS)
    create_topic(bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    before, during, after = _forms(3000, "a"), _forms(1500, "b"), _forms(1000, "c")
    produce_forms(bootstrap, topic, before)
    out = tmp_path / "noop.out"
    group = f"g-{topic}"
    proc = ServiceProcess(
        "noop",
        bootstrap,
        topic,
        group=group,
        options={"output": str(out)},
        env={"RUNTRAIL_BATCH_SIZE": "200"},
        log_path=tmp_path / "svc.log",
    )
    try:
        port = proc.metrics_port()
        wait_for(lambda: len(read_lines(out)) >= len(before), 90, what="the first events")
        wait_for(lambda: _status(port, "/readyz") == 200, 30, what="readiness")
        pid = proc.proc.pid
        # published across the kill: some before it, most while the broker is gone
        publisher = threading.Thread(
            target=_produce_patiently, args=(bootstrap, topic, during), daemon=True
        )
        publisher.start()
        time.sleep(0.5)
        _kill(broker)
        down_at = time.monotonic()
        wait_for(lambda: _status(port, "/readyz") == 503, 40, what="503 during the outage")
        while time.monotonic() - down_at < down_s:
            assert proc.alive(), f"the service exited: {(tmp_path / 'svc.log').read_text()[-3000:]}"
            assert _status(port, "/healthz") == 200  # the loop keeps turning
            time.sleep(1)
        assert _status(port, "/readyz") == 503
        broker.start()
        publisher.join(300)
        produce_forms(bootstrap, topic, after)
        expected = [str(f["eventId"]) for f in before + during + after]
        ids = lambda: [line.split(" ", 1)[0] for line in read_lines(out)]  # noqa: E731
        wait_for(lambda: set(ids()) >= set(expected), 180, what="every event in the output")
        wait_for(lambda: _status(port, "/readyz") == 200, 60, what="ready again")
        wait_for(
            lambda: (
                committed_offsets(bootstrap, group, topic, PARTITIONS)
                == end_offsets(bootstrap, topic, PARTITIONS)
            ),
            60,
            what="everything committed",
        )
        assert proc.alive() and proc.proc.pid == pid
        seen = Counter(ids())
        assert set(seen) == set(expected)  # nothing missing, nothing foreign
        doubled = {k: c for k, c in seen.items() if c > 1}
        assert not doubled, f"{len(doubled)} events written twice"
        assert proc.terminate() == 0
    finally:
        proc.close()


def test_broker_sigkill_45s_service_keeps_pid_and_catches_up(
    restartable_broker: LocalBroker, tmp_path: Path
) -> None:
    _outage(restartable_broker, tmp_path, 45)


@pytest.mark.slow
def test_broker_sigkill_120s_service_keeps_pid_and_catches_up(
    restartable_broker: LocalBroker, tmp_path: Path
) -> None:
    _outage(restartable_broker, tmp_path, 120)
