"""The resume cache's lookup API over real HTTP, at its parameters' edges: another tenant's
token on both routes, ``wait_ms`` and ``offsets`` malformed or out of range, ``run`` and
``scope`` missing or wrong. A bad value must be a 400 naming the parameter; a foreign tenant
must get exactly a miss; a huge ``wait_ms`` must stay capped by the service's limit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtrail.http_server import TokenAuth
from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.resume import CacheEntry, Kind
from runtrail.resume.builder import WriteBatch
from runtrail_services.resume_cache.http_api import LookupServer
from runtrail_services.resume_cache.index import LookupIndex
from runtrail_services.resume_cache.metrics import ResumeCacheMetrics
from tests.resume_support import get

KEY = "f" * 64
ENTRY = CacheEntry("acme", "run-1", Kind.TOOL, KEY, {"secret": "acme-only"}, tool_name="t")
MAX_WAIT_MS = 300
ACME_ENTRY = f"/v1/tenants/acme/entries/tool/{KEY}?run=run-1"
#: a key acme never recorded: a miss, which is only answered once the barrier is reached
ACME_MISS = f"/v1/tenants/acme/entries/tool/{'e' * 64}?run=run-1"


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    store = open_store(RESUME_ENTRIES, sqlite_url(tmp_path / "c.db"))
    index = LookupIndex(store, "events")
    index.assigned({0: 0})
    batch = WriteBatch()
    batch.add_entry(ENTRY)
    index.consumed(batch)
    index.advanced({0: 1})
    metrics = ResumeCacheMetrics("resume-cache", CollectorRegistry())
    auth = TokenAuth({"acme": "a", "globex": "g"})
    server = LookupServer("127.0.0.1", 0, index, auth, metrics, max_wait_ms=MAX_WAIT_MS)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        store.close()


def test_another_tenants_entry_is_exactly_a_miss(base: str) -> None:
    """globex's token asking for acme's entry path must get the 404 a miss gets, never the
    entry (a tool result of another tenant) nor a different answer that confirms it exists."""
    assert get(base + ACME_ENTRY, "a")[0] == 200  # acme's own token sees it
    for scope in ("run", "tenant"):
        status, body = get(f"{base}{ACME_ENTRY}&scope={scope}", "g")
        assert (status, body) == (404, {"entry": None, "intent": None}), scope


def test_another_tenants_run_state_is_exactly_a_miss(base: str) -> None:
    """globex's token asking for acme's run state must not get it (its open intents name
    acme's tool calls) and must get what a miss gets."""
    assert get(f"{base}/v1/tenants/acme/runs/run-1", "a")[0] == 200
    status, body = get(f"{base}/v1/tenants/acme/runs/run-1", "g")
    assert (status, body) == (404, {"entry": None, "intent": None})


@pytest.mark.parametrize("wait_ms", ["abc", "1.5", "1e3"])
def test_a_wait_ms_that_is_not_a_number_is_a_400_naming_it(base: str, wait_ms: str) -> None:
    """A malformed ``wait_ms`` must be refused naming it (the message said only "invalid
    literal for int()", leaving the user to guess which parameter)."""
    status, body = get(f"{base}{ACME_ENTRY}&offsets=0:0&wait_ms={wait_ms}", "a")
    assert status == 400, (wait_ms, status, body)
    assert "wait_ms" in body["error"]


@pytest.mark.parametrize("offsets", ["0", "x:1", "0:y", "-1:0", "0:1,garbage"])
def test_malformed_offsets_are_a_400_naming_them(base: str, offsets: str) -> None:
    """A malformed ``offsets`` barrier must be refused naming it, never read as no barrier
    (which would answer a miss the client then trusts as final)."""
    status, body = get(f"{base}{ACME_ENTRY}&offsets={offsets}", "a")
    assert status == 400, (offsets, status, body)
    assert "offsets" in body["error"]


def test_a_huge_wait_ms_is_capped_by_the_service(base: str) -> None:
    """A client's ``wait_ms`` beyond the service's cap must not hold the request (and a
    server thread) for that long: an unreachable barrier answers 503 within the cap."""
    started = time.monotonic()
    huge = 10**30
    status, body = get(f"{base}{ACME_MISS}&offsets=0:5&wait_ms={huge}", "a")
    elapsed = time.monotonic() - started
    assert status == 503 and body["error"] == "not caught up"
    assert elapsed < 3, elapsed


def test_a_negative_wait_ms_does_not_wait_and_a_reached_barrier_answers(base: str) -> None:
    """A negative ``wait_ms`` means no wait (503 at once when not caught up), and a barrier
    already reached answers the miss as final whatever the wait."""
    started = time.monotonic()
    status, _ = get(f"{base}{ACME_MISS}&offsets=0:5&wait_ms=-{MAX_WAIT_MS}", "a")
    assert status == 503 and time.monotonic() - started < MAX_WAIT_MS / 1000 / 2
    status, body = get(f"{base}{ACME_MISS}&offsets=0:0&wait_ms=-100", "a")
    assert (status, body) == (404, {"entry": None, "intent": None})


def test_a_huge_offset_is_a_503_not_a_500(base: str) -> None:
    """An offset past any the service consumed is a barrier not reached (503), not a crash."""
    status, body = get(f"{base}{ACME_MISS}&offsets=0:{10**30}&wait_ms=0", "a")
    assert status == 503, body


def test_run_and_scope_are_checked(base: str) -> None:
    """An entry lookup without ``run`` or with an unknown ``scope`` must be a 400 naming it,
    not a miss the client takes as "never recorded"."""
    status, body = get(f"{base}/v1/tenants/acme/entries/tool/{KEY}", "a")
    assert status == 400 and "run" in body["error"]
    status, body = get(f"{base}{ACME_ENTRY}&scope=everything", "a")
    assert status == 400 and "scope" in body["error"]
