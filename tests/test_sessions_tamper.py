"""Issue 12.4: a snapshot edited while the service holds its session is kept, not overwritten.

``save_if`` used to compare only the stored digest *field*, so an edit that left the field alone
was erased by the next save, silently. Now the stored content is verified before it is
replaced, on the file store and on a real PostgreSQL alike; the service halts that session
visibly (``runtrail_sessions_halted``, a log line, the session API) and keeps the evidence.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail.sessions import CorruptSnapshot, parse_snapshot, seal
from runtrail.sessions.snapshot import verified_digest
from runtrail.sessions.store_file import FileSessionStore
from tests.checkpoint_support import held
from tests.sessions_support import built_snapshot, session_forms
from tests.test_sessions_service import TOPIC, delivered, service, turn

TOKENS = {"t1": "tok-t1"}


class Stored:
    """A session store URL plus a way to edit the stored snapshot behind the store's back."""

    def __init__(self, url: str, read: Callable[[], bytes], write: Callable[[bytes], None]):
        self.url = url
        self.read = read
        self.write = write

    def tamper(self) -> bytes:
        """Change the content (an answer the agent gave), leaving the digest field as it was."""
        before = self.read()
        after = before.replace(b'"a1"', b'"forged"', 1)
        assert after != before
        self.write(after)
        return after


@pytest.fixture(params=["file", "postgres"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stored]:
    if request.param == "file":
        root = tmp_path / "state" / "sessions"
        path = FileSessionStore(root).path_of("t1", "s1")
        yield Stored(root.as_uri(), path.read_bytes, path.write_bytes)
        return
    url = str(request.getfixturevalue("postgres_url"))
    open_store(SESSION_SNAPSHOTS, url).close()  # creates the table
    with psycopg.connect(url, autocommit=True) as conn:
        key = ("t1", "s1")

        def read() -> bytes:
            row = conn.execute(
                "SELECT snapshot FROM runtrail_sessions WHERE tenant_id = %s AND session_id = %s",
                key,
            ).fetchone()
            assert row is not None
            return str(row[0]).encode()

        def write(data: bytes) -> None:
            conn.execute(
                "UPDATE runtrail_sessions SET snapshot = %s "
                "WHERE tenant_id = %s AND session_id = %s",
                (data.decode(), *key),
            )

        yield Stored(url, read, write)


# --- the store contract ----------------------------------------------------------------------
def test_save_if_refuses_to_replace_an_edited_snapshot(stored: Stored) -> None:
    store = open_store(SESSION_SNAPSHOTS, stored.url)
    first = built_snapshot(10)
    assert store.save_if(first, None)
    assert store.save_if(built_snapshot(11), first.digest)  # an untouched one is replaced
    current = built_snapshot(11)
    evidence = stored.tamper()
    with pytest.raises(CorruptSnapshot, match="digest mismatch") as refused:
        store.save_if(built_snapshot(12), current.digest)
    assert refused.value.where  # names the file or row
    assert stored.read() == evidence  # nothing overwritten
    with pytest.raises(CorruptSnapshot):
        store.load("t1", "s1")
    store.close()


def test_the_fast_content_check_agrees_with_the_full_one() -> None:
    # a nested {"digest", "eventLog"} pair in the content must not fool the fast path
    decoy = {"digest": "sha256:" + "0" * 64, "eventLog": []}
    snapshot = seal(
        tenant_id="t",
        session_id="s",
        last_applied_sequence={},
        event_log=[],
        compact_results=[decoy],
    )
    data = snapshot.to_bytes()
    assert verified_digest(data, "x") == parse_snapshot(data, "x").digest == snapshot.digest
    edited = data.replace(b'"tenantId":"t"', b'"tenantId":"u"')
    with pytest.raises(CorruptSnapshot, match="digest mismatch"):
        verified_digest(edited, "x")
    reformatted = json.dumps(json.loads(data), indent=1).encode()  # same content, other bytes
    assert verified_digest(reformatted, "x") == snapshot.digest


# --- the service, in process -----------------------------------------------------------------
def api_get(port: int, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", "Bearer tok-t1")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_service_halts_a_session_whose_snapshot_was_edited_under_it(
    stored: Stored, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    svc = service(
        tmp_path / "state",
        store_url=stored.url,
        every_n_events=2,
        at_step_end="false",
        http_enabled="true",
        http_port=0,
        http_tokens=json.dumps(TOKENS),
    )
    try:
        forms = session_forms(8)
        turn(svc, delivered(forms[:4], first_offset=0))  # saved, held in memory
        assert svc.api is not None
        assert api_get(svc.api.port, "/v1/sessions/s1")[0] == 200
        evidence = stored.tamper()
        with caplog.at_level(logging.ERROR, logger="runtrail_services.sessions.service"):
            turn(svc, delivered(forms[4:6], first_offset=4))  # the session speaks again
        assert stored.read() == evidence  # kept, not overwritten
        halted = svc.context.registry.get_sample_value(
            "runtrail_sessions_halted", {"service": "sessions"}
        )
        assert halted == 1
        assert any("t1/s1 halted" in r.getMessage() for r in caplog.records)
        assert held(svc) == {(TOPIC, 0): 4}  # nothing after the edit is committed
        status, body = api_get(svc.api.port, "/v1/sessions/s1")
        assert status == 409 and body["status"] == "halted"
        assert body["reason"].startswith("digest mismatch")
        assert str(tmp_path) not in json.dumps(body)  # no server path reaches the client
        listed = api_get(svc.api.port, "/v1/sessions")[1]["sessions"]
        assert [(s["sessionId"], s.get("status")) for s in listed] == [("s1", "halted")]
        turn(svc, delivered(forms[6:8], first_offset=6))  # and it stays halted
        assert stored.read() == evidence
    finally:
        svc.close()
    assert stored.read() == evidence  # not even the shutdown save overwrites it


# --- end to end: a running service process over the real broker ------------------------------
def metric(port: int, name: str) -> float | None:
    import re

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    match = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


@pytest.mark.kafka
@pytest.mark.slow
def test_a_running_service_keeps_an_edited_snapshot_and_reports_the_halt(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    from runtrail.config import Settings
    from runtrail.publisher import Publisher
    from tests.support import ServiceProcess, create_topic, unique_topic, wait_for
    from tests.test_sessions_end_to_end import Agent, api_port, stored_revision

    topic = create_topic(kafka_bootstrap, unique_topic("sess-tamper"), partitions=1)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    state = tmp_path / "state"
    store = FileSessionStore(state / "sessions")
    path = store.path_of("acme", "S")
    log = tmp_path / "service.log"
    proc = ServiceProcess(
        "sessions",
        kafka_bootstrap,
        topic,
        group=f"g-{topic}",
        options={"at_step_end": "true", "http_port": "0", "publish_pointers": "false"},
        env={
            "RUNTRAIL_STATE_DIR": str(state),
            "RUNTRAIL_SESSIONS_HTTP_TOKENS": json.dumps({"acme": "tok-acme"}),
        },
        log_path=log,
    )
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        tenant="acme",
        spool_dir=tmp_path / "spool",
    )
    try:
        with Publisher(settings) as publisher:
            agent = Agent(publisher)
            agent.steps_of("acme", "S", "run-1", 2)  # saved at each STEP_END
            sent = agent.sent[("acme", "S")]
            wait_for(
                lambda: stored_revision(store, "acme", "S") == sent,
                60,
                what="the save",
            )
            evidence = path.read_bytes().replace(b'"run-1:1"', b'"run-1:forged"', 1)
            assert evidence != path.read_bytes()
            path.write_bytes(evidence)  # digest field untouched
            agent.steps_of("acme", "S", "run-1", 1)  # the session speaks again
            port = proc.metrics_port()
            wait_for(lambda: metric(port, "runtrail_sessions_halted") == 1, 60, what="the halt")
        assert path.read_bytes() == evidence
        assert "acme/S halted" in log.read_text()
        req = urllib.request.Request(f"http://127.0.0.1:{api_port(log)}/v1/sessions/S")
        req.add_header("Authorization", "Bearer tok-acme")
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10)
        body = json.loads(answer.value.read())
        assert answer.value.code == 409 and body["status"] == "halted"
        assert proc.terminate() == 0
    finally:
        proc.close()
    assert path.read_bytes() == evidence  # the shutdown save did not erase it either
