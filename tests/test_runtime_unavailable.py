"""A store that cannot take writes: the service stays up, says 503, commits nothing, catches up.

"Disk full" is real here: the test lowers the service process's ``RLIMIT_FSIZE`` (with
``prlimit``) to one byte, so every write of its store files fails with ``EFBIG`` (Python
ignores ``SIGXFSZ``), exactly as a full disk fails them with ``ENOSPC``; then it lifts the
limit. noop's output file and the projector's SQLite store are tested.
"""

from __future__ import annotations

import re
import resource
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.runtime import Delivered, Service, ServiceContext
from runtrail.runtime.runner import ServiceRunner
from runtrail.runtime.unavailable import StoreUnavailable
from tests.projection_support import full_run
from tests.projector_support import sqlite_url, stored_offsets
from tests.support import (
    ServiceProcess,
    committed_offsets,
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


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _readyz_body(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return str(resp.read().decode())
    except urllib.error.HTTPError as exc:
        return str(exc.read().decode())


class FullDisk:
    """Every write a process makes to a file past its first byte fails, until lifted."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.saved = resource.prlimit(pid, resource.RLIMIT_FSIZE)

    def __enter__(self) -> FullDisk:
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (1, self.saved[1]))
        return self

    def __exit__(self, *exc: object) -> None:
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, self.saved)


def _ride_out(
    proc: ServiceProcess,
    bootstrap: str,
    topic: str,
    group: str,
    produce_more: Callable[[], None],
    what: str,
) -> None:
    """With the disk full: 503 naming ``what``, the metric at 1, no commit moves; then recover."""
    port = proc.metrics_port()
    wait_for(lambda: _status(port, "/readyz") == 200, 60, what="readiness")
    pid = proc.proc.pid
    with FullDisk(pid):
        produce_more()
        wait_for(lambda: _status(port, "/readyz") == 503, 60, what="503 while the disk is full")
        assert what in _readyz_body(port)
        metrics = _scrape(port)
        assert re.search(
            rf'runtrail_store_unavailable\{{[^}}]*what="{re.escape(what)}[^"]*"\}} 1\.0', metrics
        ), metrics
        committed = committed_offsets(bootstrap, group, topic, PARTITIONS)
        time.sleep(3)  # a few backoff rounds: still up, still turning, nothing committed
        assert proc.alive()
        assert _status(port, "/healthz") == 200
        assert _status(port, "/readyz") == 503
        assert committed_offsets(bootstrap, group, topic, PARTITIONS) == committed
    wait_for(lambda: _status(port, "/readyz") == 200, 90, what="ready once writable again")
    wait_for(
        lambda: (
            committed_offsets(bootstrap, group, topic, PARTITIONS)
            == end_offsets(bootstrap, topic, PARTITIONS)
        ),
        60,
        what="everything committed",
    )
    assert proc.alive() and proc.proc.pid == pid
    assert re.search(r'runtrail_retries_total\{service="[^"]+",what="[^"]+"\} [1-9]', _scrape(port))


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("full"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=PARTITIONS)
    return name


def test_noop_with_a_full_disk_waits_and_loses_or_doubles_nothing(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    first = [form(run_id=f"r{i % 20}", sequence=i // 20 + 1) for i in range(600)]
    later = [form(run_id=f"r{i % 20}", sequence=31 + i // 20) for i in range(600)]
    produce_forms(kafka_bootstrap, topic, first)
    out = tmp_path / "noop.out"
    group = f"g-{topic}"
    proc = ServiceProcess(
        "noop",
        kafka_bootstrap,
        topic,
        group=group,
        options={"output": str(out)},
        log_path=tmp_path / "svc.log",
    )
    try:
        wait_for(lambda: len(read_lines(out)) == len(first), 60, what="the first events")
        _ride_out(
            proc,
            kafka_bootstrap,
            topic,
            group,
            lambda: produce_forms(kafka_bootstrap, topic, later),
            f"noop output {out}",
        )
        ids = Counter(line.split(" ", 1)[0] for line in read_lines(out))
        assert set(ids) == {str(f["eventId"]) for f in first + later}
        assert max(ids.values()) == 1  # nothing written twice, no torn line
        assert len(read_lines(out)) == len(first) + len(later)
        assert proc.terminate() == 0
    finally:
        proc.close()


def test_projector_with_a_full_disk_waits_and_catches_up(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    runs = [full_run(f"run-{i}") for i in range(30)]
    first = [e.json_form() for r in runs[:15] for e in r.events]
    later = [e.json_form() for r in runs[15:] for e in r.events]
    produce_forms(kafka_bootstrap, topic, first)
    db = tmp_path / "projection.db"
    group = f"g-{topic}"
    proc = ServiceProcess(
        "projector",
        kafka_bootstrap,
        topic,
        group=group,
        options={"store_url": sqlite_url(db)},
        log_path=tmp_path / "svc.log",
    )
    try:
        wait_for(
            lambda: sum(stored_offsets(db, topic, PARTITIONS).values()) == len(first),
            60,
            what="the first runs projected",
        )
        _ride_out(
            proc,
            kafka_bootstrap,
            topic,
            group,
            lambda: produce_forms(kafka_bootstrap, topic, later),
            "projection store",
        )
        wait_for(
            lambda: (
                stored_offsets(db, topic, PARTITIONS)
                == end_offsets(kafka_bootstrap, topic, PARTITIONS)
            ),
            60,
            what="the store at the end of the topic",
        )
        assert proc.terminate() == 0
    finally:
        proc.close()
    from runtrail.persistence import PROJECTIONS, open_store

    store = open_store(PROJECTIONS, sqlite_url(db))
    try:
        assert len(store.list()) == len(runs)
        assert store.list(halted=True) == []
        for run in runs:
            stored = store.get(run.tenant, run.run_id)
            assert stored is not None
    finally:
        store.close()


# --- in-process: a service whose process() says its store is down ------------------------------


class Flaky(Service):
    """``process()`` raises StoreUnavailable for its first calls, keeping nothing of them."""

    name = "flaky"

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        self.failures_left = 3
        self.seen: list[str] = []

    def process(self, batch: Sequence[Delivered]) -> None:
        if self.failures_left:
            self.failures_left -= 1
            raise StoreUnavailable("flaky store", "down for the test")
        self.seen.extend(d.event.event_id for d in batch)


def test_store_unavailable_from_process_consumes_the_batch_again(
    kafka_bootstrap: str, topic: str
) -> None:
    events = [form(run_id=f"r{i % 5}", sequence=i // 5 + 1) for i in range(300)]
    produce_forms(kafka_bootstrap, topic, events)
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        commit_interval_ms=100,
        batch_timeout_ms=100,
        group=f"g-{topic}",
    )
    runner = ServiceRunner(Flaky, settings, service_name="flaky", metrics_port=0)
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(runner.run()), daemon=True)
    thread.start()
    try:
        service = runner.service
        wait_for(lambda: len(service.seen) >= len(events), 60, what="every event")
        assert service.failures_left == 0
        assert sorted(service.seen) == sorted(str(e["eventId"]) for e in events)  # each once
        by_run: dict[str, list[int]] = {}
        order = {str(e["eventId"]): e for e in events}
        for event_id in service.seen:
            e = order[event_id]
            by_run.setdefault(str(e["runId"]), []).append(int(str(e["sequence"])))
        assert all(seqs == sorted(seqs) for seqs in by_run.values())  # partition order kept
        assert 'runtrail_retries_total{service="flaky",what="flaky store"}' in _scrape(
            runner.metrics_port
        )
    finally:
        runner.request_stop()
        thread.join(30)
    assert status == [0]
