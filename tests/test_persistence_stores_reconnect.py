"""The resume-cache and session stores on PostgreSQL come back after the server dropped their
connections (as a restart does): the persistence pool replaces them, no store reconnects itself."""

from __future__ import annotations

import psycopg

from runtrail.persistence import kinds, open_store
from runtrail.resume.builder import WriteBatch
from runtrail.resume.entry import CacheEntry
from runtrail.resume.keys import Kind
from tests.sessions_support import built_snapshot

TOPIC = "runtrail.events"


def _terminate_others(postgres_url: str) -> int:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (killed,) in rows if killed)


def test_the_resume_cache_store_survives_dropped_connections(postgres_url: str) -> None:
    store = open_store(kinds.RESUME_ENTRIES, postgres_url, readers=2)
    try:
        entry = CacheEntry("acme", "run-1", Kind.TOOL, "a" * 64, {"v": 1}, tool_name="t")
        assert store.import_entries([entry]) == 1
        assert _terminate_others(postgres_url) >= 1
        assert store.entries("acme") == [entry]  # a lookup on a replaced connection
        batch = WriteBatch()
        batch.offsets[(TOPIC, 0)] = 5
        store.apply(batch, TOPIC)  # and a write
        assert store.offsets(TOPIC) == {0: 5}
    finally:
        store.close()


def test_the_session_store_survives_dropped_connections(postgres_url: str) -> None:
    with open_store(kinds.SESSION_SNAPSHOTS, postgres_url) as sessions:
        first = built_snapshot(3)
        assert sessions.save(first)
        assert _terminate_others(postgres_url) >= 1
        loaded = sessions.load(first.tenant_id, first.session_id)
        assert loaded is not None and loaded.digest == first.digest
        assert sessions.save(built_snapshot(4))
