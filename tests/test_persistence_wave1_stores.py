"""A resume-cache, session or checkpoint store created by the previous release (wave 1) opens
on the persistence layer and keeps its rows and positions.

The tables are created here by the wave-1 DDL, copied verbatim from the previous release's
``resume/store.py``, ``sessions/store_postgres.py`` and ``sessions/checkpoints_postgres.py``,
and filled the way that code filled them; then the store is opened through the registry.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from runtrail.persistence import kinds, open_store
from runtrail.persistence.tracking import PositionRegressed
from runtrail.persistence.urls import sqlite_url
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.resume.keys import Kind
from runtrail.sessions.checkpoints import make_key, seal_record
from tests.sessions_support import built_snapshot
from tests.test_resume_builder import PROMPT, events

TOPIC = "runtrail.events"

WAVE1_RESUME_DDL = (
    """CREATE TABLE IF NOT EXISTS rc_entries (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        body TEXT NOT NULL,
        written_ms BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, kind, key))""",
    "CREATE INDEX IF NOT EXISTS rc_entries_by_tenant ON rc_entries (tenant_id, kind, key, written_ms)",
    """CREATE TABLE IF NOT EXISTS rc_intents (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        intent_id TEXT NOT NULL,
        key TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, intent_id))""",
    "CREATE INDEX IF NOT EXISTS rc_intents_by_key ON rc_intents (tenant_id, run_id, key)",
    "CREATE INDEX IF NOT EXISTS rc_intents_by_partition ON rc_intents (topic, partition)",
    """CREATE TABLE IF NOT EXISTS rc_models (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        node_id TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (tenant_id, run_id, node_id))""",
    "CREATE INDEX IF NOT EXISTS rc_models_by_partition ON rc_models (topic, partition)",
    """CREATE TABLE IF NOT EXISTS rc_runs (
        tenant_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        last_sequence BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, run_id))""",
    """CREATE TABLE IF NOT EXISTS rc_offsets (
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        next_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition))""",
)

WAVE1_SESSIONS_DDL = """
CREATE TABLE IF NOT EXISTS runtrail_sessions (
    tenant_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    revision BIGINT NOT NULL CHECK (revision >= 0),
    code_version TEXT NOT NULL,
    digest TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id)
)
"""

WAVE1_CHECKPOINTS_DDL = """
CREATE TABLE IF NOT EXISTS runtrail_thread_records (
    tenant_id TEXT COLLATE "C" NOT NULL,
    thread_id TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    ns TEXT COLLATE "C" NOT NULL,
    k1 TEXT COLLATE "C" NOT NULL,
    k2 TEXT COLLATE "C" NOT NULL,
    k3 TEXT COLLATE "C" NOT NULL,
    digest TEXT NOT NULL,
    record TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, thread_id, kind, ns, k1, k2, k3)
)
"""


@contextmanager
def _old_release(dialect: str, target: str) -> Iterator[Any]:
    """A cursor of the previous release's kind on the store, committed at the end."""
    if dialect == "sqlite":
        conn = sqlite3.connect(target)
        try:
            yield _Marks(conn.cursor(), "?")
            conn.commit()
        finally:
            conn.close()
    else:
        with psycopg.connect(target) as pg, pg.transaction(), pg.cursor() as cur:
            yield _Marks(cur, "%s")


class _Marks:
    """Executes statements written with ``?`` in the driver's placeholder style."""

    def __init__(self, cur: Any, mark: str) -> None:
        self._cur = cur
        self._mark = mark

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        self._cur.execute(statement.replace("?", self._mark), tuple(params))


def _wave1_batch() -> WriteBatch:
    builder = EntryBuilder()
    out = WriteBatch()
    specs = [
        ("MODEL_REQUEST", {"prompt": PROMPT}),
        ("MODEL_RESPONSE", {"message": "ok", "raw": None}),
        ("STEP_END", {"reason": "done"}),
        ("TOOL_CALL", {"callId": "c1", "toolName": "charge", "arguments": {"amount": 5}}),
    ]
    for e in events(*specs, run="run-1", tenant="acme"):
        builder.feed(e, 2, out)
    return out


@pytest.fixture(params=["sqlite", "postgresql"])
def wave1_cache(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(dialect, URL) of a resume-cache store as the previous release left it."""
    if request.param == "sqlite":
        target = str(tmp_path / "resume-cache.db")
        url = sqlite_url(target)
    else:
        target = url = request.getfixturevalue("postgres_url")
    batch = _wave1_batch()
    assert batch.entries and batch.intents
    with _old_release(request.param, target) as cur:
        for statement in WAVE1_RESUME_DDL:
            cur.execute(statement)
        for e in batch.entries.values():
            cur.execute(
                "INSERT INTO rc_entries (tenant_id, run_id, kind, key, body, written_ms) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (e.tenant_id, e.run_id, e.kind.value, e.key, orjson.dumps(e.to_json()).decode(), 1),
            )
        for intent, partition in (v for v in batch.intents.values() if v is not None):
            cur.execute(
                "INSERT INTO rc_intents (tenant_id, run_id, intent_id, key, topic, partition, "
                "body) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    intent.tenant_id,
                    intent.run_id,
                    intent.intent_id,
                    intent.key,
                    TOPIC,
                    partition,
                    orjson.dumps(intent.to_json()).decode(),
                ),
            )
        cur.execute("INSERT INTO rc_runs VALUES (?, ?, ?)", ("acme", "run-1", 4))
        for partition, offset in ((0, 17), (2, 4)):
            cur.execute("INSERT INTO rc_offsets VALUES (?, ?, ?)", (TOPIC, partition, offset))
    return request.param, url


def _tables(dialect: str, url: str) -> set[str]:
    if dialect == "sqlite":
        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    else:
        with psycopg.connect(url) as pg:
            rows = pg.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
    return {str(r[0]) for r in rows}


def test_a_wave1_resume_cache_store_keeps_its_rows_and_positions(
    wave1_cache: tuple[str, str],
) -> None:
    dialect, url = wave1_cache
    store = open_store(kinds.RESUME_ENTRIES, url, readers=1)
    try:
        assert store.offsets(TOPIC) == {0: 17, 2: 4}  # moved into the tracking table
        (model,) = [e for e in store.entries() if e.kind is Kind.MODEL]
        assert store.get_entry("acme", "run-1", Kind.MODEL, model.key) == model
        state = store.run_state("acme", "run-1")
        assert state.last_sequence == 4 and [i.call_id for i in state.open_intents] == ["c1"]
        assert [(i.call_id, p) for i, p in store.open_state(TOPIC, [2])[1]] == [("c1", 2)]
        # the positions now follow the one fence: forward is taken, back is refused
        forward = WriteBatch()
        forward.offsets[(TOPIC, 2)] = 9
        store.apply(forward, TOPIC)
        back = WriteBatch()
        back.offsets[(TOPIC, 0)] = 3
        with pytest.raises(PositionRegressed):
            store.apply(back, TOPIC)
        assert store.offsets(TOPIC) == {0: 17, 2: 9}
    finally:
        store.close()
    tables = _tables(dialect, url)
    assert "rc_offsets" not in tables  # nothing can keep writing the old table unnoticed
    assert {"rc_entries", "runtrail_positions", "runtrail_migrations"} <= tables

    again = open_store(kinds.RESUME_ENTRIES, url, readers=1)  # migrations already applied
    try:
        assert again.offsets(TOPIC) == {0: 17, 2: 9}
        assert len(again.entries()) == len(_wave1_batch().entries)
    finally:
        again.close()


def test_wave1_session_and_checkpoint_tables_open_with_their_rows(postgres_url: str) -> None:
    snapshot = built_snapshot(12)
    key = make_key("acme", "thread-1", "checkpoint", "", "0001")
    record = seal_record(key, {"step": 1})
    with _old_release("postgresql", postgres_url) as cur:
        cur.execute(WAVE1_SESSIONS_DDL)
        cur.execute(WAVE1_CHECKPOINTS_DDL)
        cur.execute(
            "INSERT INTO runtrail_sessions (tenant_id, session_id, revision, code_version, "
            "digest, snapshot) VALUES (?, ?, ?, ?, ?, ?)",
            (
                snapshot.tenant_id,
                snapshot.session_id,
                snapshot.revision,
                snapshot.code_version,
                snapshot.digest,
                snapshot.to_bytes().decode(),
            ),
        )
        cur.execute(
            "INSERT INTO runtrail_thread_records (tenant_id, thread_id, kind, ns, k1, k2, k3, "
            "digest, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*key, str(orjson.loads(record)["digest"]), record.decode()),
        )

    with open_store(kinds.SESSION_SNAPSHOTS, postgres_url) as sessions:
        loaded = sessions.load(snapshot.tenant_id, snapshot.session_id)
        assert loaded is not None and loaded.digest == snapshot.digest
        assert sessions.save(built_snapshot(13))  # the adopted table takes new writes
    with open_store(kinds.LANGGRAPH_CHECKPOINTS, postgres_url) as checkpoints:
        assert checkpoints.read(key) == {"step": 1}
        assert checkpoints.newest("acme", "checkpoint", "thread-1", "") == "0001"
    with psycopg.connect(postgres_url) as pg:
        applied = pg.execute(
            "SELECT component, version FROM runtrail_migrations ORDER BY component"
        ).fetchall()
    assert applied == [("checkpoints", 1), ("sessions", 1)]
