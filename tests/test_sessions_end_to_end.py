"""End to end over the real broker: an agent publishes a long session, the sessions service
saves it, is killed (SIGKILL) and restarted; the restored session (latest snapshot plus
the tail replayed from the topic) equals the session built from the whole topic from offset
zero. Tenants never mix, on the way in and through the API."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail.publisher import Publisher
from runtrail.sessions import AgentSessionStore
from runtrail.sessions.naming import session_key
from runtrail.sessions.pointer import SessionPointer
from runtrail.sessions.restore import build_from_topic, restore_session
from tests.sessions_support import read_pointers
from tests.support import (
    ServiceProcess,
    committed_offsets,
    create_topic,
    end_offsets,
    unique_topic,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOKENS = {"acme": "tok-acme", "globex": "tok-globex"}


class Agent:
    """Publishes agent steps of sessions through the real publisher; counts what it sent."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.sent: Counter[tuple[str, str]] = Counter()
        self.steps: Counter[str] = Counter()
        self.memory: dict[tuple[str, str], Any] = {}

    def _publish(self, tenant: str, session: str, run: str, event_type: str, data: Any) -> None:
        step = self.steps[run]
        event_id = self.publisher.publish(
            event_type,
            run,
            data,
            session_id=session,
            tenant_id=tenant,
            turn_id=f"t{step}",
            step=step,
        )
        assert event_id is not None
        self.sent[(tenant, session)] += 1

    def steps_of(self, tenant: str, session: str, run: str, count: int) -> None:
        for _ in range(count):
            self.steps[run] += 1
            n = self.steps[run]
            self._publish(tenant, session, run, "MODEL_REQUEST", {"prompt": {"model": "m", "q": n}})
            self._publish(tenant, session, run, "MODEL_RESPONSE", {"message": f"{run}:{n}"})
            self._publish(
                tenant,
                session,
                run,
                "TOOL_CALL",
                {"callId": f"{run}-{n}", "toolName": "search", "arguments": {"n": n}},
            )
            self._publish(
                tenant,
                session,
                run,
                "TOOL_RESULT",
                {"callId": f"{run}-{n}", "toolName": "search", "output": [n]},
            )
            self._publish(tenant, session, run, "STEP_END", {"reason": "tool_use"})
            if n % 4 == 0:
                memory = {"run": run, "step": n, "facts": [f"fact-{i}" for i in range(n % 5)]}
                self.memory[(tenant, session)] = memory
                self._publish(
                    tenant,
                    session,
                    run,
                    "session.snapshot",
                    {"lastAppliedSequence": n * 5, "memory": memory, "compactResults": [n]},
                )
        assert self.publisher.flush(30) == 0


def api_port(log: Path) -> int:
    found: list[int] = []

    def seen() -> bool:
        match = re.search(r"session API on [0-9.]+:(\d+)", log.read_text() if log.exists() else "")
        if match:
            found.append(int(match.group(1)))
        return bool(match)

    wait_for(seen, 30, what="the session API port in the log")
    return found[0]


def api_get(port: int, path: str, token: str) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def stored_revision(store: AgentSessionStore, tenant: str, session: str) -> int:
    snapshot = store.load(tenant, session)
    return snapshot.revision if snapshot else 0


def test_killed_and_restarted_service_restores_sessions_equal_to_the_whole_topic(
    kafka_bootstrap: str, postgres_url: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("sess"), partitions=3)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=3)
    pointers_topic = create_topic(
        kafka_bootstrap, f"{topic}.sessions", partitions=2, **{"cleanup.policy": "compact"}
    )
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        tenant="acme",
        spool_dir=tmp_path / "spool",
    )
    store = open_store(SESSION_SNAPSHOTS, postgres_url)
    group = f"g-{topic}"
    options = {
        "store_url": postgres_url,
        # saves every 40 events only (and at shutdown): when the first service is killed,
        # events it applied are unsaved, and only the held offsets bring them back
        "every_n_events": "40",
        "at_step_end": "false",
        "idle_save_s": "600",
        "http_port": "0",
    }
    env = {
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_SESSIONS_TOPIC": pointers_topic,
        "RUNTRAIL_SESSIONS_HTTP_TOKENS": json.dumps(TOKENS),
        "RUNTRAIL_BATCH_SIZE": "10",  # saves are due per batch: keep batches small
    }

    def start(name: str) -> ServiceProcess:
        return ServiceProcess(
            "sessions",
            kafka_bootstrap,
            topic,
            group=group,
            options=options,
            env=env,
            log_path=tmp_path / f"{name}.log",
        )

    with Publisher(settings) as publisher:
        agent = Agent(publisher)
        # phase 1: a long session (and another of the same tenant, and a same-named session of
        # another tenant), then a service that saves and is killed mid-way
        agent.steps_of("acme", "S", "run-1", 30)
        agent.steps_of("acme", "S2", "run-3", 8)
        agent.steps_of("globex", "S", "run-4", 9)
        first = start("first")
        try:
            wait_for(lambda: stored_revision(store, "acme", "S") >= 120, 60, what="saves")
            wait_for(lambda: first.processed() >= sum(agent.sent.values()), 30, what="all read")
            time.sleep(1.0)  # several commit intervals: whatever may be committed, is
            first.kill()
        finally:
            first.close()
        committed = committed_offsets(kafka_bootstrap, group, topic, 3)
        saved_before_kill = stored_revision(store, "acme", "S")
        assert saved_before_kill < agent.sent[("acme", "S")]  # the kill left events unsaved

        # phase 2: the session goes on (a second run) while the service is down; restart
        agent.steps_of("acme", "S", "run-1", 10)
        agent.steps_of("acme", "S", "run-2", 20)
        agent.steps_of("acme", "S2", "run-3", 4)
        ends = end_offsets(kafka_bootstrap, topic, 3)
        to_read = sum(ends[p] - max(committed[p], 0) for p in ends)  # re-reads included
        second = start("second")
        try:
            wait_for(
                lambda: stored_revision(store, "acme", "S") > saved_before_kill,
                60,
                what="saves after the restart",
            )
            port = api_port(tmp_path / "second.log")
            status, body = api_get(port, "/v1/sessions/S", "tok-acme")
            assert status == 200 and json.loads(body)["tenantId"] == "acme"
            status, body = api_get(port, "/v1/sessions/S", "tok-globex")  # the same name
            assert status == 200 and json.loads(body)["tenantId"] == "globex"
            assert api_get(port, "/v1/sessions/S2", "tok-globex")[0] == 404  # acme's only
            assert api_get(port, "/v1/sessions/S2", "tok-acme")[0] == 200
            wait_for(lambda: second.processed() >= to_read, 60, what="all read")
            assert second.terminate() == 0  # saves what is unsaved on the way out
        finally:
            second.close()
        for tenant, session in agent.sent:  # nothing lost through the kill, all saved at stop
            assert stored_revision(store, tenant, session) == agent.sent[(tenant, session)]
        saved = agent.sent[("acme", "S")]

        # phase 3: a tail the service never saw
        agent.steps_of("acme", "S", "run-2", 3)

    restored = restore_session(store, "acme", "S", settings)
    whole = build_from_topic("acme", "S", settings)
    assert restored.snapshot is not None and restored.snapshot.revision == saved
    assert restored.replayed == agent.sent[("acme", "S")] - saved > 0
    assert whole.revision == agent.sent[("acme", "S")]
    assert restored.session.snapshot().digest == whole.snapshot().digest
    assert list(restored.session.events()) == list(whole.events())
    assert restored.session.memory == agent.memory[("acme", "S")]
    assert set(whole.last_applied_sequence) == {"run-1", "run-2"}

    other = store.load("globex", "S")  # same session ID, other tenant: its own events only
    assert other is not None and other.revision == agent.sent[("globex", "S")]
    assert {e["tenantId"] for e in other.event_log} == {"globex"}
    assert other.digest == build_from_topic("globex", "S", settings).snapshot().digest

    latest = read_pointers(kafka_bootstrap, pointers_topic)
    pointer = SessionPointer.from_bytes(latest[session_key("acme", "S").encode()] or b"")
    assert pointer.revision == saved
    assert pointer.resolve().digest == restored.snapshot.digest
    store.close()
