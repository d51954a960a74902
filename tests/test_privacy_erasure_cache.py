"""Erasure and the resume-cache store, and erasing again, with real processes: the broker,
``runtrail run resume-cache`` as a child process on a real SQLite (or PostgreSQL) store, and
``runtrail erase`` as a command.

* ``runtrail erase`` deletes the erased run's entries from the resume-cache store it is given
  (default the service's): no lookup, by run or across the tenant, finds them, and
  ``runtrail cache export`` lists none, while another run's still answer.
* The service deletes them too when it reads the ``run.content_erased`` event (here the
  command was given another store), and never serves a hit whose answer no longer opens (its
  content pruned): a model entry is a miss, a tool entry an outcome unknown to its run.
* An erasure that stopped half-way and was run again records what both attempts deleted, and
  erasing the run again records nothing, deletes nothing (a session saved since stays) and
  says when it was erased.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events.domain_events import ContentErased
from runtrail.persistence import RESUME_ENTRIES, SESSION_SNAPSHOTS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.privacy.content_store import key_prefix
from runtrail.privacy.protect import vault_from_settings
from runtrail.privacy.reference import ERASED
from runtrail.privacy.resolve import Resolver
from runtrail.publisher import Publisher
from runtrail.resume import ResumeCache, Scope
from runtrail.resume.http_client import ServiceCacheClient
from runtrail_services.sessions.settings import default_store_url
from tests.publisher_support import CODEC, read_all
from tests.resume_support import TOKENS, CacheService, make_topics
from tests.support import runtrail_cli, wait_for
from tests.test_privacy_erase_copies import session_of

pytestmark = pytest.mark.kafka

SECRET = "SENTINEL-cache-erase-41d2"
KEPT = "KEPT-cache-other-8c0e"
POLICY = {"byReference": "all", "subject": "run"}


def prompt(secret: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"ask {secret}"}]}


def run_events(secret: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("MODEL_REQUEST", {"prompt": prompt(secret)}),
        ("MODEL_RESPONSE", {"message": f"answer {secret}", "raw": {"id": secret}}),
        ("STEP_END", {"reason": "tool_use"}),
        ("TOOL_CALL", {"callId": "c1", "toolName": "search", "arguments": {"q": secret}}),
        ("TOOL_RESULT", {"callId": "c1", "toolName": "search", "output": [secret]}),
    ]


@dataclass
class ProtectedCacheService(CacheService):
    privacy: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.privacy}


@dataclass
class Stack:
    service: CacheService
    settings: Settings
    env: dict[str, str]  # the commands'
    offsets: dict[int, int] = field(default_factory=dict)

    def cache(self, run: str, scope: Scope = Scope.RUN) -> ResumeCache:
        vault = vault_from_settings(self.settings)
        remote = ServiceCacheClient(self.service.url, TOKENS["acme"], wait_ms=30_000)
        offsets = dict(self.offsets)
        return ResumeCache(
            run,
            tenant="acme",
            remote=remote,
            scope=scope,
            read_your_writes=lambda: offsets,
            resolver=Resolver(vault),
        )

    def stored(self, run: str) -> int:
        store = open_store(RESUME_ENTRIES, self.service.store_url, readers=1)
        try:
            return len(store.entries("acme", run))
        finally:
            store.close()

    def publish(self, runs: dict[str, str]) -> None:
        with Publisher(self.settings) as publisher:
            for run, secret in runs.items():
                for kind, data in run_events(secret):
                    assert publisher.publish(kind, run, data, step=1)
            assert publisher.flush(60) == 0
            self.offsets = dict(publisher.acked_offsets())


def start(bootstrap: str, home: Path, store_url: str = "") -> Stack:
    events, cache_topic = make_topics(bootstrap)
    state = home / "state"
    privacy = {
        "RUNTRAIL_CONTENT_STORE_URL": (home / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (home / "keys").as_uri(),
        "RUNTRAIL_PRIVACY_POLICY": json.dumps(POLICY),
    }
    service = ProtectedCacheService(
        bootstrap, events, cache_topic, home, store_url=store_url, privacy=privacy
    ).start()
    settings = Settings(
        bootstrap_servers=bootstrap,
        events_topic=events,
        resume_cache_topic=cache_topic,
        tenant="acme",
        state_dir=state,
        spool_dir=home / "spool",
        content_store_url=privacy["RUNTRAIL_CONTENT_STORE_URL"],
        key_store_url=privacy["RUNTRAIL_KEY_STORE_URL"],
        privacy_policy=POLICY,
    )
    env = {
        **privacy,
        "RUNTRAIL_BOOTSTRAP_SERVERS": bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": events,
        "RUNTRAIL_RESUME_CACHE_TOPIC": cache_topic,
        "RUNTRAIL_STATE_DIR": str(state),
        "RUNTRAIL_TENANT": "acme",
        "RUNTRAIL_RESUME_CACHE_STORE_URL": service.store_url,  # the command's default store
    }
    return Stack(service, settings, env)


def erasure_events(bootstrap: str, topic: str, run: str) -> list[ContentErased]:
    """The ``run.content_erased`` events of ``run`` on the events topic."""
    events = [CODEC.decode(m.value()).event for m in read_all(bootstrap, topic, 1, timeout=10)]
    return [e.data for e in events if e.run_id == run and isinstance(e.data, ContentErased)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_erasing_a_run_deletes_its_entries_from_the_cache_store(
    kafka_bootstrap: str, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    store_url = str(request.getfixturevalue("postgres_url")) if backend == "postgresql" else ""
    stack = start(kafka_bootstrap, tmp_path, store_url)
    try:
        stack.publish({"R1": SECRET, "R2": KEPT})
        wait_for(lambda: stack.stored("R1") == 2 and stack.stored("R2") == 2, 60, what="entries")
        before = stack.cache("R1").lookup_model(prompt(SECRET))
        assert before is not None and before.message == f"answer {SECRET}"

        erased = runtrail_cli(
            stack.env, "erase", "--tenant", "acme", "--run", "R1", "--reason", "x"
        )
        assert erased.returncode == 0, erased.stderr
        report = json.loads(erased.stdout.strip().splitlines()[-1])
        assert report["copiesDeleted"]["cacheStore"] == 2, report  # the model's and the tool's

        # at once: the command deleted them from the store the service answers from
        assert stack.stored("R1") == 0
        assert stack.cache("R1").lookup_model(prompt(SECRET)) is None
        tool = stack.cache("R1").lookup_tool("search", {"q": SECRET})
        assert tool.entry is None and tool.intent is None
        tenant_wide = stack.cache("R-new", Scope.TENANT)
        assert tenant_wide.lookup_model(prompt(SECRET)) is None  # no "[erased]" answer
        assert tenant_wide.lookup_tool("search", {"q": SECRET}).entry is None
        kept = stack.cache("R2").lookup_model(prompt(KEPT))
        assert kept is not None and kept.message == f"answer {KEPT}"  # the other run's stays

        exported = tmp_path / "export.json"
        done = runtrail_cli(
            stack.env,
            *("cache", "export", str(exported), "--tenant", "acme"),
            *("--store-url", stack.service.store_url),
        )
        assert done.returncode == 0, done.stderr
        assert "R1" not in exported.read_text() and "R2" in exported.read_text()

        # the service read the erasure event and deleted nothing more, added nothing back
        wait_for(
            lambda: len(erasure_events(kafka_bootstrap, stack.settings.events_topic, "R1")) == 1,
            30,
            what="the erasure event",
        )
        assert stack.stored("R1") == 0 and stack.stored("R2") == 2
    finally:
        stack.service.stop()


def test_the_service_erases_on_the_event_and_serves_no_unopenable_answer(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    stack = start(kafka_bootstrap, tmp_path)
    try:
        stack.publish({"R1": SECRET, "R2": KEPT})
        wait_for(lambda: stack.stored("R1") == 2 and stack.stored("R2") == 2, 60, what="entries")

        # the command is given another store: only the service can delete the entries
        elsewhere = sqlite_url(tmp_path / "elsewhere.db")
        open_store(RESUME_ENTRIES, elsewhere).close()  # another, empty cache store
        erased = runtrail_cli(
            stack.env,
            *("erase", "--tenant", "acme", "--run", "R1", "--reason", "x"),
            *("--cache-store", elsewhere),
        )
        assert erased.returncode == 0, erased.stderr
        assert json.loads(erased.stdout)["copiesDeleted"]["cacheStore"] == 0
        wait_for(lambda: stack.stored("R1") == 0, 30, what="the service to erase R1's entries")
        assert stack.cache("R1").lookup_model(prompt(SECRET)) is None
        assert stack.cache("R-new", Scope.TENANT).lookup_model(prompt(SECRET)) is None
        assert stack.stored("R2") == 2

        # R2's content is gone (pruned) while its entries stay: none is served as an answer
        vault = vault_from_settings(stack.settings)
        assert vault is not None
        key_id = vault.keys.key_id_of("acme", "R2")
        assert key_id is not None
        assert vault.content.delete_prefix(key_prefix("acme", key_id)) > 0
        vault.close()
        assert stack.cache("R2").lookup_model(prompt(KEPT)) is None  # the model is asked again
        tool = stack.cache("R2").lookup_tool("search", {"q": KEPT})
        assert tool.entry is None and tool.intent is not None  # its outcome: unknown
        assert tool.intent.call_id == "c1" and tool.intent.run_id == "R2"
        other = stack.cache("R-new", Scope.TENANT)
        assert other.lookup_model(prompt(KEPT)) is None
        answer = other.lookup_tool("search", {"q": KEPT})
        assert answer.entry is None and answer.intent is None  # not that run's call
        assert ERASED not in json.dumps([e.to_json() for e in other.entries()])
    finally:
        stack.service.stop()


def test_a_rerun_records_every_attempt_and_erasing_again_records_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, cache_topic = make_topics(kafka_bootstrap)
    state = tmp_path / "state"
    env = {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": events,
        "RUNTRAIL_RESUME_CACHE_TOPIC": cache_topic,
        "RUNTRAIL_STATE_DIR": str(state),
        "RUNTRAIL_TENANT": "t1",
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
        "RUNTRAIL_PRIVACY_POLICY": json.dumps(POLICY),
    }
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=events,
        tenant="t1",
        state_dir=state,
        spool_dir=tmp_path / "spool",
        content_store_url=env["RUNTRAIL_CONTENT_STORE_URL"],
        key_store_url=env["RUNTRAIL_KEY_STORE_URL"],
        privacy_policy=POLICY,
    )
    with Publisher(settings) as publisher:
        for kind, data in run_events(SECRET) * 2:
            assert publisher.publish(kind, "R5", data, step=1)
        assert publisher.flush(60) == 0
    command = ("erase", "--tenant", "t1", "--run", "R5", "--reason", "t")

    broken = tmp_path / "cache.db"  # a cache store that cannot be opened (no SQLite file):
    broken.write_text("not a database")  # the step after the objects and topics stops it
    stopped = runtrail_cli(env, *command, "--cache-store", f"sqlite:///{broken}")
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    assert "stopped before it finished, at cacheStore" in stopped.stderr
    finished = runtrail_cli(env, *command)
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert report["objectsDeleted"] == 10, report  # 5 fields twice: by the first attempt
    recorded = erasure_events(kafka_bootstrap, events, "R5")
    assert [e.objects_deleted for e in recorded] == [10]
    assert recorded[0].key_id == report["keyId"] is not None

    # a session rebuilt since, holding the run: erasing again leaves it and records nothing
    sessions = open_store(SESSION_SNAPSHOTS, default_store_url(state))
    try:
        assert sessions.save(session_of("R5", "s-rebuilt", "[erased]"))
        again = runtrail_cli(env, *command)
        assert again.returncode == 1, again.stdout + again.stderr
        assert "erased already, at" in again.stderr and "nothing recorded" in again.stderr
        earlier = json.loads(again.stdout)
        assert (
            earlier["alreadyErased"] and earlier["erasedAt"] and earlier["keyId"] == report["keyId"]
        )
        assert earlier["eventId"] == report["eventId"] and earlier["objectsDeleted"] == 10
        assert sessions.load("t1", "s-rebuilt") is not None
    finally:
        sessions.close()
    assert len(erasure_events(kafka_bootstrap, events, "R5")) == 1
