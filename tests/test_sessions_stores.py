"""The AgentSessionStore contract, on both stores: a file folder and a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail.sessions import AgentSession, AgentSessionSnapshot, AgentSessionStore
from tests.sessions_support import built_session, built_snapshot, run_writer


@pytest.fixture(params=["file", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return (tmp_path / "sessions").as_uri()
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(store_url: str) -> AgentSessionStore:
    return open_store(SESSION_SNAPSHOTS, store_url)


def test_round_trip_across_processes(store_url: str, store: AgentSessionStore) -> None:
    """Seed 000 §4: save, new process, load, restore — equal (both directions)."""
    digest = run_writer("save", store_url, "45")  # another process saves
    loaded = store.load("t1", "s1")
    assert loaded is not None and loaded.digest == digest
    restored = AgentSession("t1", "s1")
    restored.restore(loaded)
    original = built_session(45)
    assert restored.snapshot().digest == original.snapshot().digest
    assert restored.memory == original.memory and restored.memory is not None
    assert restored.compact_results == original.compact_results
    assert list(restored.events()) == list(original.events())

    bigger = built_snapshot(60)
    assert store.save(bigger)
    assert run_writer("load", store_url, "t1", "s1") == f"60 {bigger.digest}"


def test_newest_wins_and_compare_and_set(store: AgentSessionStore) -> None:
    old, new = built_snapshot(10), built_snapshot(11)
    assert store.save(new)
    assert not store.save(old)  # never an older snapshot over a newer one
    loaded = store.load("t1", "s1")
    assert loaded is not None and loaded.digest == new.digest
    assert store.save(new)  # the same one again is fine (idempotent)

    assert not store.save_if(built_snapshot(12), None)  # expected absent, but present
    assert not store.save_if(built_snapshot(12), old.digest)
    assert store.save_if(built_snapshot(12), new.digest)
    assert store.save_if(old, built_snapshot(12).digest)  # CAS is about the digest only
    assert store.save_if(built_snapshot(3, session="s2"), None)
    assert store.load("t1", "s2") is not None


def test_save_all_if_answers_each_save_in_order(store: AgentSessionStore) -> None:
    """One outcome per snapshot, in the order given, each as ``save_if`` would answer it; the
    snapshots are taken from a lazy iterable (the service builds each as it goes)."""
    first = built_snapshot(4, session="a")
    assert store.save(first)
    attempts = [
        (built_snapshot(5, session="a"), first.digest),  # the CAS holds: saved
        (built_snapshot(3, session="b"), first.digest),  # nothing stored under b: refused
        (built_snapshot(2, session="c"), None),  # nothing stored, none expected: saved
    ]
    taken: list[str] = []

    def lazily() -> Iterator[tuple[AgentSessionSnapshot, str | None]]:
        for attempt in attempts:
            taken.append(attempt[0].session_id)
            yield attempt

    assert store.save_all_if(lazily()) == [True, False, True]
    assert taken == ["a", "b", "c"]
    saved_a, saved_c = store.load("t1", "a"), store.load("t1", "c")
    assert saved_a is not None and saved_a.digest == attempts[0][0].digest
    assert saved_c is not None and saved_c.digest == attempts[2][0].digest
    assert store.load("t1", "b") is None
    assert store.save_all_if([]) == []


def test_list_delete_and_tenants_never_mix(store: AgentSessionStore) -> None:
    mine = built_snapshot(5, tenant="t1", session="shared")
    theirs = built_snapshot(7, tenant="t2", session="shared")
    odd = built_snapshot(3, tenant="../t3", session="a/../../b")
    for snapshot in (mine, theirs, odd):
        assert store.save(snapshot)
    assert store.load("t1", "shared").digest == mine.digest  # type: ignore[union-attr]
    assert store.load("t2", "shared").digest == theirs.digest  # type: ignore[union-attr]
    assert store.load("t1", "nope") is None and store.load("t9", "shared") is None
    assert [(s.tenant_id, s.session_id) for s in store.list("t1")] == [("t1", "shared")]
    assert [(s.tenant_id, s.session_id) for s in store.list()] == [
        ("../t3", "a/../../b"),
        ("t1", "shared"),
        ("t2", "shared"),
    ]
    assert all(s.updated_at.endswith("Z") for s in store.list())
    assert store.load("../t3", "a/../../b").digest == odd.digest  # type: ignore[union-attr]
    assert store.delete("t1", "shared")
    assert not store.delete("t1", "shared")
    assert store.load("t1", "shared") is None
    assert store.load("t2", "shared") is not None


def test_file_paths_stay_inside_their_tenant_folder(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = open_store(SESSION_SNAPSHOTS, root.as_uri())
    store.save(built_snapshot(3, tenant="..", session="../../escape"))
    store.save(built_snapshot(3, tenant="t", session="x" * 400))  # too long for a file name
    files = sorted(p.relative_to(root) for p in root.rglob("*.json"))
    assert all(len(p.parts) == 2 and not p.name.startswith(".") for p in files), files
    assert not (tmp_path / "escape.json").exists()
    assert ("t", "x" * 400) in [(s.tenant_id, s.session_id) for s in store.list()]
    assert store.load("t", "x" * 400) is not None
