"""The OTLP drops store on both SQL adapters (SQLite, a real PostgreSQL): counts added per
(tenant, run, reason), the first sample kept, the mapper's batches below the counted position
skipped (a replay, or a mapper that lost the partition writing late), the filters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.drops.store import SqlDropStore
from runtrail.drops.tally import NO_RUN, DropTally
from runtrail.persistence import open_store
from runtrail.persistence.kinds import OTLP_DROPS
from runtrail.persistence.urls import sqlite_url

RUN = "5b8efff798038103d269b633813fc60c"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlDropStore]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "otlp-drops.db")
    else:
        url = request.getfixturevalue("postgres_url")
    opened = open_store(OTLP_DROPS, url)
    yield opened
    opened.close()


def tally(*rows: tuple[str, str, str, int]) -> DropTally:
    out = DropTally()
    for trace_id, reason, sample, n in rows:
        out.add(trace_id, reason, sample, n)
    return out


def counts(store: SqlDropStore, **filters: str) -> dict[tuple[str, str, str], tuple[int, str]]:
    return {(r.tenant_id, r.run_id, r.reason): (r.count, r.sample) for r in store.rows(**filters)}


def test_counts_add_up_per_tenant_run_and_reason(store: SqlDropStore) -> None:
    store.add("acme", tally((RUN, "not-genai", "GET /", 2), (NO_RUN, "log-without-span", "x", 1)))
    store.add("acme", tally((RUN, "not-genai", "POST /", 3)))
    store.add("globex", tally((RUN, "not-genai", "GET /", 1)))
    assert counts(store, tenant="acme") == {
        ("acme", RUN, "not-genai"): (5, "GET /"),
        ("acme", "", "log-without-span"): (1, "x"),
    }
    assert counts(store, run_id="") == {("acme", "", "log-without-span"): (1, "x")}
    assert set(counts(store, run_id=RUN)) == {
        ("acme", RUN, "not-genai"),
        ("globex", RUN, "not-genai"),
    }
    row = store.rows(tenant="acme", run_id=RUN)[0]
    assert row.first_seen_ms <= row.last_seen_ms
    assert store.rows(since_ms=row.last_seen_ms + 60_000) == []


def test_a_mappers_batch_below_the_counted_position_is_not_counted_again(
    store: SqlDropStore,
) -> None:
    one = tally((RUN, "not-genai", "GET /", 1))
    store.add_positioned("raw", {0: [(4, "acme", one), (7, "acme", one)], 1: [(2, "acme", one)]})
    assert counts(store)[("acme", RUN, "not-genai")][0] == 3
    # a replay from offset 4 (the partition's commit was held there): 4 and 7 are counted,
    # 9 is new; partition 1 moves on from 3
    store.add_positioned("raw", {0: [(4, "acme", one), (7, "acme", one), (9, "acme", one)]})
    assert counts(store)[("acme", RUN, "not-genai")][0] == 4
    # a mapper that lost partition 0 writes what it mapped before: nothing, and no error
    store.add_positioned("raw", {0: [(8, "acme", one)]})
    # a drop decided by the clock has no offset: always counted
    store.add_positioned("raw", {1: [(None, "acme", tally((RUN, "log-waited-too-long", "e", 2)))]})
    assert counts(store) == {
        ("acme", RUN, "not-genai"): (4, "GET /"),
        ("acme", RUN, "log-waited-too-long"): (2, "e"),
    }
