"""The service's lookup side without Kafka: read-your-writes waits, 503, the overlay, auth."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtrail.http_server import TokenAuth
from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.resume import CacheEntry, Kind, NotCaughtUp, Scope
from runtrail.resume.builder import WriteBatch
from runtrail.resume.http_client import ServiceCacheClient
from runtrail.resume.remote import Lookup
from runtrail.resume.store import CacheStore
from runtrail_services.resume_cache.http_api import LookupServer
from runtrail_services.resume_cache.index import LookupIndex
from runtrail_services.resume_cache.metrics import ResumeCacheMetrics

TOPIC = "events"
ENTRY = CacheEntry("acme", "run-1", Kind.TOOL, "f" * 64, {"ok": True}, tool_name="t")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CacheStore]:
    opened = open_store(RESUME_ENTRIES, sqlite_url(tmp_path / "c.db"))
    yield opened
    opened.close()


def _batch() -> WriteBatch:
    batch = WriteBatch()
    batch.add_entry(ENTRY)
    return batch


def test_a_miss_waits_until_consumed_and_a_hit_comes_from_the_unflushed_overlay(
    store: CacheStore,
) -> None:
    index = LookupIndex(store, TOPIC)
    index.assigned({0: 0})
    ask = {
        "tenant": "acme",
        "run_id": "run-1",
        "kind": Kind.TOOL,
        "key": ENTRY.key,
        "scope": Scope.RUN,
    }
    with pytest.raises(NotCaughtUp):
        index.lookup(**ask, min_offsets={0: 4}, timeout_s=0.2)
    assert index.lookup(**ask, min_offsets={}, timeout_s=0).entry is None  # no barrier: a miss

    answers: list[Lookup] = []
    waiter = threading.Thread(
        target=lambda: answers.append(index.lookup(**ask, min_offsets={0: 4}, timeout_s=10))
    )
    waiter.start()
    time.sleep(0.3)
    assert answers == []
    batch = _batch()
    index.consumed(batch)
    index.advanced({0: 5})
    waiter.join(5)
    assert answers and answers[0].entry == ENTRY  # before any flush
    store.apply(index.pending(), TOPIC)
    index.flushed(batch)
    assert index.lookup(**ask, min_offsets={0: 4}, timeout_s=0).entry == ENTRY  # from the store


def test_partitions_of_other_instances_count_once_the_shared_store_has_them(
    store: CacheStore,
) -> None:
    index = LookupIndex(store, TOPIC)  # owns nothing
    other = LookupIndex(store, TOPIC)
    other.assigned({0: 0})
    other.consumed(_batch())
    other.advanced({0: 10})
    assert not index.caught_up({0: 9}, 0.1)
    store.apply(other.pending(), TOPIC)  # the other instance flushed
    assert index.caught_up({0: 9}, 1.0)


def test_http_answers_503_when_not_caught_up_and_404_across_tenants(store: CacheStore) -> None:
    index = LookupIndex(store, TOPIC)
    index.assigned({0: 0})
    index.consumed(_batch())
    index.advanced({0: 1})
    metrics = ResumeCacheMetrics("resume-cache", CollectorRegistry())
    server = LookupServer(
        "127.0.0.1", 0, index, TokenAuth({"acme": "a", "globex": "g"}), metrics, max_wait_ms=300
    )
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        acme = ServiceCacheClient(url, "a", wait_ms=200)
        ask = {"kind": Kind.TOOL, "key": ENTRY.key, "scope": Scope.RUN, "run_id": "run-1"}
        assert acme.lookup(tenant="acme", min_offsets={0: 0}, **ask).entry == ENTRY
        with pytest.raises(NotCaughtUp):
            acme.lookup(tenant="acme", min_offsets={0: 1}, **{**ask, "key": "e" * 64})
        assert acme.lookup(tenant="globex", min_offsets={}, **ask) == Lookup(None)
        globex = ServiceCacheClient(url, "g", wait_ms=0)
        assert globex.lookup(tenant="globex", min_offsets={}, **ask) == Lookup(None)
        state = acme.run_state(tenant="acme", run_id="run-1", min_offsets={0: 0})
        assert state.open_intents == ()
    finally:
        server.stop()
