"""The figure: every service rides out a broker outage under load, and loses nothing.

All six services (capture, resume-cache, sessions, audit, projector, noop) run as real
``runtrail run SERVICE`` child processes with their embedded stores, on a broker of the test's
own. Events are published steadily; the broker is SIGKILLed (or stopped with ``runtrail kafka
down``) in the middle, kept away, then started again. Afterwards:

* every service still runs with the PID it started with (none exited or was restarted);
* every ``/readyz`` answered 503 during the outage and answers 200 after it;
* every output is complete, with nothing lost or doubled: the capture files hold exactly the
  records a pairer makes of the topic, the resume-cache store every entry the builder makes,
  every session snapshot every event of its session, every audit chain every event of its run
  and verifies, every projection its run up to the last sequence, and noop committed the end.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from runtrail.audit.store import verify_stored
from runtrail.config import Settings
from runtrail.events import validate_json_form
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url as audit_sqlite_url
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.sessions.store_file import FileSessionStore
from runtrail_tools.kafka.broker import LocalBroker
from tests.sessions_support import session_forms
from tests.support import (
    ServiceProcess,
    committed_offsets,
    encode,
    end_offsets,
    wait_for,
)
from tests.test_capture_service_kafka import file_lines, reference
from tests.test_outage_output_topics import sigkill

pytestmark = [pytest.mark.kafka]

TOPIC = "runtrail.events"
PARTITIONS = Settings().partitions  # as `topics ensure` creates the events topic
SERVICES = ("capture", "resume-cache", "sessions", "audit", "projector", "noop")
SESSIONS = 4  # one tenant each, two runs each
EVENTS_PER_SESSION = 90


def options(service: str, state: Path) -> dict[str, str]:
    return {
        "capture": {"sink_url": (state / "capture").as_uri(), "idle_flush_s": "86400"},
        "resume-cache": {"http_port": "0", "tokens": '{"tok": "t0"}'},
        "sessions": {"http_enabled": "false", "idle_save_s": "1"},
        "audit": {"tree_head_interval_s": "5"},
        "projector": {},
        "noop": {},
    }[service]


def workload() -> list[dict[str, Any]]:
    """Sessions of two runs each, one tenant per session, interleaved as agents publish."""
    per_session = [
        session_forms(EVENTS_PER_SESSION, tenant=f"t{i}", session=f"s{i}", seed=f"seed{i}")
        for i in range(SESSIONS)
    ]
    return [f for group in zip(*per_session, strict=True) for f in group]


class Stack:
    """The six services, each with its own state folder, log and consumer group."""

    def __init__(self, bootstrap: str, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: dict[str, ServiceProcess] = {}
        for service in SERVICES:
            state = tmp_path / service
            self.procs[service] = ServiceProcess(
                service,
                bootstrap,
                TOPIC,
                group=f"g-{service}",
                options=options(service, state),
                env={"RUNTRAIL_STATE_DIR": str(state), "RUNTRAIL_SHUTDOWN_TIMEOUT_S": "30"},
                log_path=tmp_path / f"{service}.log",
            )
        self.pids = {name: p.proc.pid for name, p in self.procs.items()}
        self.ports = {name: p.metrics_port(90) for name, p in self.procs.items()}

    def readyz(self, service: str) -> int:
        try:
            url = f"http://127.0.0.1:{self.ports[service]}/readyz"
            with urllib.request.urlopen(url, timeout=3) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0  # not answering at all

    def all_ready(self) -> bool:
        return all(self.readyz(s) == 200 for s in SERVICES)

    def log_tails(self, services: set[str], lines: int = 15) -> str:
        """The last log lines of some services (not the client's connection noise)."""
        out = []
        for service in sorted(services):
            text = (self.tmp_path / f"{service}.log").read_text(errors="replace").splitlines()
            kept = [t for t in text if not t.startswith("%") and "GET /" not in t]
            out.append(f"--- {service}:\n" + "\n".join(kept[-lines:]))
        return "\n".join(out)

    def dead(self) -> list[str]:
        return [name for name, p in self.procs.items() if not p.alive()]

    def close(self) -> dict[str, int | None]:
        statuses: dict[str, int | None] = {}
        for name, proc in self.procs.items():
            try:
                statuses[name] = proc.terminate(40) if proc.alive() else proc.proc.returncode
            except subprocess.TimeoutExpired:
                statuses[name] = None
            proc.close()
        return statuses


class SteadyPublisher:
    """Produces forms at a steady rate from a thread; records wait in the producer's queue
    while the broker is away (no timeout), in order, so the topic gets each exactly once."""

    def __init__(self, bootstrap: str, forms: list[dict[str, Any]], rate_per_s: float) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": 0,
                "partitioner": "murmur2_random",
            }
        )
        self.forms = forms
        self.interval = 1.0 / rate_per_s
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for form in self.forms:
            self.producer.produce(
                TOPIC,
                key=form["runId"].encode(),
                value=encode(form),
                on_delivery=lambda err, msg: err and self.errors.append(str(err)),
            )
            self.producer.poll(0)
            time.sleep(self.interval)

    def start(self) -> SteadyPublisher:
        self.thread.start()
        return self

    def finish(self, timeout: float = 120.0) -> None:
        self.thread.join(timeout)
        assert self.producer.flush(timeout) == 0, "events left unpublished"
        assert not self.errors, self.errors


# --- what complete means, per service ----------------------------------------------------------
def runs_of(forms: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in forms:
        runs.setdefault((f["tenantId"], f["runId"]), []).append(f)
    return runs


class Expected:
    def __init__(self, forms: list[dict[str, Any]], bootstrap: str) -> None:
        self.runs = runs_of(forms)
        self.sessions: dict[tuple[str, str], int] = {}
        for f in forms:
            key = (f["tenantId"], f["sessionId"])
            self.sessions[key] = self.sessions.get(key, 0) + 1
        builder, batch = EntryBuilder(), WriteBatch()
        for f in forms:
            builder.feed(validate_json_form(f), 0, batch)
        self.entries = {
            (e.tenant_id, e.run_id, e.kind.value, e.key) for e in batch.entries.values()
        }
        self.capture = sorted(set(reference(bootstrap, TOPIC, len(forms)).values()))


def missing(stack: Stack, expected: Expected, bootstrap: str) -> dict[str, str]:
    """Per service, what its output still lacks (empty once everything is complete)."""
    root = stack.tmp_path
    out: dict[str, str] = {}
    lines = file_lines(root / "capture" / "capture")
    distinct = sorted(set(lines))
    if distinct != expected.capture:
        out["capture"] = f"{len(distinct)} distinct of {len(expected.capture)} records"
    elif len({orjson.loads(line)["recordId"] for line in lines}) != len(distinct):
        out["capture"] = "a record was written twice with different content"
    db = root / "resume-cache" / "resume-cache.db"
    if db.exists():
        store = open_store(RESUME_ENTRIES, f"sqlite://{db}", readers=1)
        try:
            got = {(e.tenant_id, e.run_id, e.kind.value, e.key) for e in store.entries()}
        finally:
            store.close()
        if got != expected.entries:
            out["resume-cache"] = f"{len(got)} of {len(expected.entries)} entries"
    else:
        out["resume-cache"] = "no store"
    sessions = FileSessionStore(root / "sessions" / "sessions")
    for (tenant, session), count in expected.sessions.items():
        snapshot = sessions.load(tenant, session)
        revision = snapshot.revision if snapshot is not None else 0
        if revision != count:
            out["sessions"] = out.get("sessions", "") + f" {tenant}/{session}: {revision}/{count}"
    links = open_store(AUDIT_LINKS, audit_sqlite_url(root / "audit" / "audit.db"))
    try:
        for (tenant, run), forms in expected.runs.items():
            chain = links.load_chain(tenant, run)
            if len(chain) != len(forms):
                out["audit"] = out.get("audit", "") + f" {tenant}/{run}: {len(chain)}/{len(forms)}"
            elif not verify_stored(links, tenant, run).valid:
                out["audit"] = f"{tenant}/{run}: the chain does not verify"
    finally:
        links.close()
    projections = open_store(PROJECTIONS, f"sqlite:///{root / 'projector' / 'projection.db'}")
    try:
        for (tenant, run), forms in expected.runs.items():
            stored = projections.get(tenant, run)
            last = max(int(f["sequence"]) for f in forms)
            if stored is None or stored.halted or stored.state is None:
                out["projector"] = f"{tenant}/{run}: {stored.halt_reason if stored else 'none'}"
            elif stored.state.version != last:
                out["projector"] = f"{tenant}/{run} at {stored.state.version} of {last}"
    finally:
        projections.close()
    ends = end_offsets(bootstrap, TOPIC, PARTITIONS)
    committed = committed_offsets(bootstrap, "g-noop", TOPIC, PARTITIONS)
    if any(committed[p] != end for p, end in ends.items() if end > 0):
        dlq = end_offsets(bootstrap, f"{TOPIC}.dlq", PARTITIONS)
        out["noop"] = f"committed {committed} of {ends} (dead letters {dlq})"
    return out


# --- the scenario --------------------------------------------------------------------------------
@pytest.fixture
def stack(restartable_broker: LocalBroker, tmp_path: Path) -> Iterator[Stack]:
    bootstrap = restartable_broker.bootstrap_servers
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtrail_tools.cli.main",
            "topics",
            "ensure",
            "--bootstrap-servers",
            bootstrap,
            "--events-topic",
            TOPIC,
        ],
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0, status.stderr
    services = Stack(bootstrap, tmp_path)
    try:
        wait_for(services.all_ready, 120, 0.5, what="every service ready")
        yield services
    finally:
        services.close()


def outage(broker: LocalBroker, stack: Stack, seconds: float, how: str) -> None:
    """Run the outage, polling every /readyz; asserts each one answered 503 meanwhile."""
    if how == "sigkill":
        sigkill(broker)
    else:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "runtrail_tools.cli.main",
                "kafka",
                "down",
                "--state-dir",
                str(broker.home.parent),
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert not broker.is_running()
    not_ready: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        not_ready.update(s for s in SERVICES if stack.readyz(s) == 503)
        assert not stack.dead(), f"exited during the outage: {stack.dead()}"
        time.sleep(0.5)
    never = set(SERVICES) - not_ready
    assert not never, f"never 503 during the outage: {never}; " + stack.log_tails(never)
    broker.start()


def scenario(broker: LocalBroker, stack: Stack, seconds: float, how: str) -> None:
    bootstrap = broker.bootstrap_servers
    forms = workload()
    third = len(forms) // 3
    first = SteadyPublisher(bootstrap, forms[:third], rate_per_s=200).start()
    first.finish()
    wait_for(
        lambda: all(p.processed() >= third for p in stack.procs.values()),
        120,
        1.0,
        what="every service through the first third",
    )
    rest = SteadyPublisher(bootstrap, forms[third:], rate_per_s=8).start()  # on through it
    time.sleep(3)
    outage(broker, stack, seconds, how)
    rest.finish(timeout=180)

    expected = Expected(forms, bootstrap)
    assert len(expected.capture) > 0 and len(expected.entries) > 0
    lacking: dict[str, str] = {}

    def complete() -> bool:
        lacking.clear()
        lacking.update(missing(stack, expected, bootstrap))
        return not lacking

    try:
        wait_for(complete, 180, 1.0, what="every output complete")
    except AssertionError:
        raise AssertionError(
            f"outputs incomplete: {lacking}\n{stack.log_tails(set(lacking))}"
        ) from None
    wait_for(stack.all_ready, 60, 0.5, what="every /readyz 200 after the outage")
    assert not stack.dead()
    assert {n: p.proc.pid for n, p in stack.procs.items()} == stack.pids
    statuses = stack.close()
    assert statuses == dict.fromkeys(SERVICES, 0), statuses
    assert missing(stack, expected, bootstrap) == {}  # the clean stop changed nothing


def test_every_service_rides_out_a_45s_broker_sigkill(
    restartable_broker: LocalBroker, stack: Stack
) -> None:
    scenario(restartable_broker, stack, 45, "sigkill")
