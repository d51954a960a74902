"""Issue 11.8 for the services whose full disk was only tested in process (sessions,
resume-cache) or not at all (audit): each runs as a real ``runtrail run SERVICE`` child on
topics made by ``runtrail topics ensure``, its store in its state folder, and its disk "fills"
(``RLIMIT_FSIZE`` lowered to one byte, as test_runtime_unavailable.py does for noop and the
projector). Meanwhile ``/readyz`` is 503 naming the store, nothing is committed and the PID
stays; when the disk has room again it is ready, commits the end, and the store holds
everything exactly once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.audit.store import verify_stored
from runtrail.events import validate_json_form
from runtrail.persistence import AUDIT_LINKS, RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url as audit_sqlite_url
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.sessions.store_file import FileSessionStore
from tests.sessions_support import session_forms
from tests.support import ServiceProcess, end_offsets, produce_forms
from tests.test_runtime_poison_services import ensure_topics
from tests.test_runtime_unavailable import PARTITIONS, _ride_out

pytestmark = [pytest.mark.kafka]

SESSIONS = 4
EVENTS = 30  # per session, over its two runs

OPTIONS = {
    "audit": {"tree_head_interval_s": "5"},
    "sessions": {"http_enabled": "false", "idle_save_s": "1"},
    "resume-cache": {"http_port": "0", "tokens": '{"tok": "t1"}'},
}


class Setup:
    """A service on topics of its own, its state in ``tmp_path/state``."""

    def __init__(self, bootstrap: str, tmp_path: Path, service: str) -> None:
        self.bootstrap = bootstrap
        self.topic = f"full-{service}-{uuid.uuid4().hex[:8]}"
        self.group = f"g-{self.topic}"
        self.state = tmp_path / "state"
        self.env = {
            "RUNTRAIL_EVENTS_TOPIC": self.topic,
            "RUNTRAIL_DLQ_TOPIC": f"{self.topic}.dlq",
            "RUNTRAIL_RESUME_CACHE_TOPIC": f"{self.topic}.cache",
            "RUNTRAIL_SESSIONS_TOPIC": f"{self.topic}.sessions",
            "RUNTRAIL_OTLP_RAW_TOPIC": f"{self.topic}.otlp-raw",
            "RUNTRAIL_AUDIT_TOPIC": f"{self.topic}.audit",
            "RUNTRAIL_STATE_DIR": str(self.state),
        }
        ensure_topics(bootstrap, self.env, partitions=PARTITIONS)
        per_session = [session_forms(EVENTS, session=f"s{i}") for i in range(SESSIONS)]
        forms = [f for group in zip(*per_session, strict=True) for f in group]  # interleaved
        for f in forms:  # each session's two runs of its own, so keys spread over partitions
            f["runId"] = f["correlationId"] = f"{f['sessionId']}-{f['runId']}"
        half = len(forms) // 2
        self.first, self.later, self.forms = forms[:half], forms[half:], forms
        produce_forms(bootstrap, self.topic, self.first)
        ends = end_offsets(bootstrap, self.topic, PARTITIONS)
        assert all(ends.values()), ends  # every partition has records (see _ride_out)
        self.proc = ServiceProcess(
            service,
            bootstrap,
            self.topic,
            group=self.group,
            options=OPTIONS[service],
            env=self.env,
            log_path=tmp_path / "svc.log",
        )

    def ride_out(self, what: str) -> None:
        _ride_out(
            self.proc,
            self.bootstrap,
            self.topic,
            self.group,
            lambda: produce_forms(self.bootstrap, self.topic, self.later),
            what,
        )
        assert self.proc.terminate() == 0


@pytest.fixture
def setup(request: Any, kafka_bootstrap: str, tmp_path: Path) -> Iterator[Setup]:
    made = Setup(kafka_bootstrap, tmp_path, request.param)
    try:
        yield made
    finally:
        made.proc.close()


def runs(forms: list[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for f in forms:
        out.setdefault((f["tenantId"], f["runId"]), []).append(f["eventId"])
    return out


@pytest.mark.parametrize("setup", ["audit"], indirect=True)
def test_audit_with_a_full_disk_waits_and_seals_everything_once(setup: Setup) -> None:
    setup.ride_out("audit store")
    links = open_store(AUDIT_LINKS, audit_sqlite_url(setup.state / "audit.db"))
    try:
        for (tenant, run), ids in runs(setup.forms).items():
            chain = [str(link.event["eventId"]) for link in links.load_chain(tenant, run)]
            assert sorted(chain) == sorted(ids) and len(chain) == len(ids), run
            assert verify_stored(links, tenant, run).valid
    finally:
        links.close()


@pytest.mark.parametrize("setup", ["sessions"], indirect=True)
def test_sessions_with_a_full_disk_waits_and_loses_nothing(setup: Setup) -> None:
    setup.ride_out("session store")
    store = FileSessionStore(setup.state / "sessions")
    for i in range(SESSIONS):
        snapshot = store.load("t1", f"s{i}")
        assert snapshot is not None and snapshot.revision == EVENTS, i


@pytest.mark.parametrize("setup", ["resume-cache"], indirect=True)
def test_resume_cache_with_a_full_disk_waits_and_loses_nothing(setup: Setup) -> None:
    setup.ride_out("resume-cache store")
    store = open_store(RESUME_ENTRIES, f"sqlite://{setup.state / 'resume-cache.db'}", readers=1)
    try:
        got = {(e.tenant_id, e.run_id, e.kind.value, e.key) for e in store.entries()}
    finally:
        store.close()
    builder, batch = EntryBuilder(), WriteBatch()
    for f in setup.forms:
        builder.feed(validate_json_form(f), 0, batch)
    want = {(e.tenant_id, e.run_id, e.kind.value, e.key) for e in batch.entries.values()}
    assert got == want and want
