"""Helpers of the projector service tests (no tests here; named for the area's file pattern).

Runs are built with :class:`tests.projection_support.Run` (validated events, deterministic
event IDs) and produced as JSON forms; the service runs as ``runtrail run projector`` in a
child process (:class:`tests.support.ServiceProcess`) or in this process (for tests that
patch the projector); the replay runs through the CLI entry point in this process.
"""

from __future__ import annotations

import contextlib
import io
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import ProjectionStore
from runtrail.runtime.runner import ServiceRunner
from runtrail_services.projector.service import ProjectorService
from runtrail_tools.cli.main import main
from tests.projection_support import Run
from tests.support import ServiceProcess, end_offsets, wait_for

Form = dict[str, Any]


def forms(run: Run) -> list[Form]:
    return [e.json_form() for e in run.events]


def interleave(*runs: list[Form]) -> list[Form]:
    """Round-robin over runs: per-run order kept, runs mixed as agents publish them."""
    out: list[Form] = []
    queues = [list(r) for r in runs]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def stored_offsets(db: Path, topic: str, partitions: int) -> dict[int, int]:
    if not db.exists():
        return {}
    store = open_store(PROJECTIONS, sqlite_url(db))
    try:
        return store.stored_offsets(topic, range(partitions))
    finally:
        store.close()


def caught_up(bootstrap: str, db: Path, topic: str, partitions: int) -> bool:
    """Whether the store's offsets reached the end of every non-empty partition."""
    ends = {p: o for p, o in end_offsets(bootstrap, topic, partitions).items() if o > 0}
    stored = stored_offsets(db, topic, partitions)
    return all(stored.get(p) == o for p, o in ends.items())


def wait_caught_up(
    bootstrap: str, db: Path, topic: str, partitions: int, timeout: float = 90.0
) -> None:
    wait_for(lambda: caught_up(bootstrap, db, topic, partitions), timeout, 0.25, what="catch-up")


def projector(
    bootstrap: str,
    topic: str,
    db: Path,
    log: Path,
    *,
    group: str | None = None,
    options: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> ServiceProcess:
    """``runtrail run projector`` into the SQLite store ``db`` (its DLQ is ``<topic>.dlq``)."""
    return ServiceProcess(
        "projector",
        bootstrap,
        topic,
        group=group or f"g-{topic}",
        options={"store_url": sqlite_url(db), **(options or {})},
        env=env,
        log_path=log,
    )


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a /metrics text (0 if absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return 0.0


def scrape(proc: ServiceProcess) -> str:
    import urllib.request

    port = proc.metrics_port()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def cli(*argv: str) -> tuple[int, str, str]:
    """Run ``runtrail ARGV`` in this process; (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def replay(bootstrap: str, topic: str, into: Path, *extra: str) -> tuple[int, str, str]:
    """``runtrail replay projection --into sqlite:///INTO`` over ``topic``."""
    return cli(
        "replay",
        "projection",
        "--into",
        sqlite_url(into),
        "--bootstrap-servers",
        bootstrap,
        "--events-topic",
        topic,
        *extra,
    )


def copy_store(src: Path, dst: Path) -> Path:
    """A consistent copy of a SQLite store (WAL included), to tamper with."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    return dst


@contextlib.contextmanager
def projection_at(db: Path) -> Iterator[ProjectionStore]:
    store = open_store(PROJECTIONS, sqlite_url(db))
    try:
        yield store
    finally:
        store.close()


class InProcessProjector:
    """The projector service run by the real runtime on a thread of this process (so a test
    can patch the projector); stopped like SIGTERM does."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        db: Path,
        *,
        extra_schema_dirs: list[Path] | None = None,
        **options: str,
    ) -> None:
        settings = Settings(
            bootstrap_servers=bootstrap,
            events_topic=topic,
            dlq_topic=f"{topic}.dlq",
            group=f"g-{topic}",
            commit_interval_ms=200,
            extra_schema_dirs=extra_schema_dirs or [],
        )
        self.registry = CollectorRegistry()
        self.runner = ServiceRunner(
            ProjectorService,
            settings,
            service_name="projector",
            options={"store_url": sqlite_url(db), **options},
            metrics_port=0,
            registry=self.registry,
        )
        self.status: int | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.status = self.runner.run()

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, {"service": "projector", **labels}) or 0.0

    def stop(self) -> int | None:
        self.runner.request_stop()
        self._thread.join(60)
        return self.status
