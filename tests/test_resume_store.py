"""The resume-cache store contract, against SQLite and a real PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.resume.builder import EntryBuilder, WriteBatch
from runtrail.resume.entry import CacheEntry
from runtrail.resume.keys import Kind, Scope
from runtrail.resume.store import CacheStore
from tests.test_resume_builder import PROMPT, events

TOPIC = "runtrail.events"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CacheStore]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "cache.db")
    else:
        url = request.getfixturevalue("postgres_url")
    opened = open_store(RESUME_ENTRIES, url, readers=2)
    try:
        yield opened
    finally:
        opened.close()


def _fed(
    builder: EntryBuilder,
    specs: list[tuple[str, dict[str, object]]],
    run: str = "run-1",
    tenant: str = "acme",
) -> WriteBatch:
    out = WriteBatch()
    for offset, e in enumerate(events(*specs, run=run, tenant=tenant)):
        builder.feed(e, 2, out)
        out.offsets[(TOPIC, 2)] = offset + 1
    return out


def test_entries_offsets_and_open_state_survive_a_restart(store: CacheStore) -> None:
    builder = EntryBuilder()
    batch = _fed(
        builder,
        [
            ("MODEL_REQUEST", {"prompt": PROMPT}),
            ("MODEL_RESPONSE", {"message": "ok", "raw": None}),
            ("STEP_END", {"reason": "done"}),
            ("TOOL_CALL", {"callId": "c1", "toolName": "charge", "arguments": {"amount": 5}}),
            ("MODEL_REQUEST", {"prompt": {**PROMPT, "temperature": 1}}),
        ],
    )
    store.apply(batch, TOPIC)
    assert store.offsets(TOPIC) == {2: 5}
    (model,) = [e for e in store.entries() if e.kind is Kind.MODEL]
    assert store.get_entry("acme", "run-1", Kind.MODEL, model.key) == model
    assert store.get_entry("acme", "run-2", Kind.MODEL, model.key) is None
    assert store.get_entry("acme", "run-2", Kind.MODEL, model.key, Scope.TENANT) == model
    assert store.get_entry("globex", "run-1", Kind.MODEL, model.key, Scope.TENANT) is None

    models, intents = store.open_state(TOPIC, [2])
    assert [n.prompt["temperature"] for n in models] == [1]
    assert [(i.call_id, p) for i, p in intents] == [("c1", 2)]
    assert store.open_state(TOPIC, [0]) == ([], [])
    state = store.run_state("acme", "run-1")
    assert state.last_sequence == 5 and [i.call_id for i in state.open_intents] == ["c1"]
    assert store.get_intent("acme", "run-1", intents[0][0].key) == intents[0][0]

    restarted = EntryBuilder()
    restarted.load(models, intents)
    out = WriteBatch()
    for e in events(("TOOL_RESULT", {"callId": "c1", "toolName": "charge", "output": 1}), step=1):
        restarted.feed(e, 2, out)
    store.apply(out, TOPIC)
    assert store.run_state("acme", "run-1").open_intents == ()
    assert store.get_entry("acme", "run-1", Kind.TOOL, intents[0][0].key) is not None
    assert store.run_state("acme", "run-1").last_sequence == 5  # never goes back


def test_entries_of_one_run(store: CacheStore) -> None:
    first = CacheEntry("acme", "run-1", Kind.TOOL, "a" * 64, {"v": 1}, tool_name="t")
    other = CacheEntry("acme", "run-2", Kind.TOOL, "b" * 64, {"v": 3}, tool_name="t")
    theirs = CacheEntry("globex", "run-1", Kind.TOOL, "c" * 64, {"v": 4}, tool_name="t")
    assert store.import_entries([first, other, theirs]) == 3
    assert store.entries("acme", "run-1") == [first]
    assert store.entries("acme", "run-2") == [other]
    assert store.entries("globex", "run-1") == [theirs]
    assert store.entries("globex", "run-2") == []
    with pytest.raises(ValueError, match="tenant"):
        store.entries(None, "run-1")


def test_first_outcome_wins_and_import_export(store: CacheStore) -> None:
    first = CacheEntry("acme", "run-1", Kind.TOOL, "a" * 64, {"v": 1}, tool_name="t")
    second = CacheEntry("acme", "run-1", Kind.TOOL, "a" * 64, {"v": 2}, tool_name="t")
    assert store.import_entries([first]) == 1
    assert store.import_entries([second, first]) == 0
    assert store.entries("acme") == [first]
    assert store.entries("globex") == []
    stats = store.stats()
    assert stats["tenants"]["acme"]["tool"] == 1
