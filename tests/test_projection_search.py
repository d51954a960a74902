"""The runs page's query on both projection stores (SQLite and a real PostgreSQL server):
substring search over run ID, sessions, models and tools; filters by status, errors and time
range; every sort key both ways; keyset pages after and before that add up to the whole
ordered list; the total; and an index under every page query (the plan, not a timing)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import ProjectionBatch, ProjectionStore, replay
from runtrail.projection.store import SORT_KEYS, RunQuery, sort_value
from runtrail.projection.store_sql import search_statements
from runtrail.projection.store_sqlite import path_of
from tests.projection_support import listed_run
from tests.test_projection_store import new_url  # noqa: F401  (the two-database fixture)

TENANT = "t1"


@pytest.fixture
def store(new_url: Any) -> Iterator[ProjectionStore]:  # noqa: F811
    opened = open_store(PROJECTIONS, new_url("projection"))
    runs = [listed_run(n) for n in range(1, 41)] + [listed_run(7, "t2")]
    opened.apply_batch(ProjectionBatch(projections=[replay(r.events) for r in runs]))
    try:
        yield opened
    finally:
        opened.close()


def ids(rows: Any) -> list[str]:
    return [r.run_id for r in rows]


def all_pages(store: ProjectionStore, query: RunQuery) -> list[str]:
    """Every page after the first, in order, then back again: both ways give the same list."""
    seen: list[str] = []
    page = store.search(query)
    pages = [page]
    seen += ids(page.rows)
    while page.more_after:
        last = page.rows[-1]
        page = store.search(_with(query, after=(sort_value(last, query.sort), last.run_id)))
        pages.append(page)
        seen += ids(page.rows)
    back: list[str] = ids(page.rows)
    while page.more_before:
        first = page.rows[0]
        page = store.search(_with(query, before=(sort_value(first, query.sort), first.run_id)))
        back = ids(page.rows) + back
    assert back == seen
    assert all(p.total == pages[0].total for p in pages)
    return seen


def _with(query: RunQuery, **changes: Any) -> RunQuery:
    fields = {name: getattr(query, name) for name in RunQuery.__dataclass_fields__}
    fields.update({"after": None, "before": None, **changes})
    return RunQuery(**fields)


def test_newest_first_by_default_and_every_order_pages_both_ways(store: ProjectionStore) -> None:
    everything = store.search(RunQuery(TENANT, limit=100))
    assert everything.total == 40 and not everything.more_after and not everything.more_before
    assert ids(everything.rows) == [f"run-{n:03d}" for n in range(40, 0, -1)]  # newest first
    for sort in SORT_KEYS:
        for descending in (True, False):
            query = RunQuery(TENANT, sort=sort, descending=descending, limit=7)
            whole = ids(store.search(_with(query, limit=100)).rows)
            assert all_pages(store, query) == whole, (sort, descending)
            keys = [sort_value(r, sort) for r in store.search(_with(query, limit=100)).rows]
            if sort == "events":
                keys = [f"{int(k):09d}" for k in keys]
            assert keys == sorted(keys, reverse=descending), sort


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("run-00", [f"run-{n:03d}" for n in range(9, 0, -1)]),
        ("HAIKU", [f"run-{n:03d}" for n in range(40, 0, -2)]),  # a model, any case
        ("tool_3", [f"run-{n:03d}" for n in range(38, 0, -5)]),  # a tool
        ("sess-1", [f"run-{n:03d}" for n in range(40, 0, -1)]),  # the session
        ("100%_", []),  # LIKE's wildcards are matched as themselves
    ],
)
def test_search_is_a_substring_of_run_session_model_and_tool(
    store: ProjectionStore, text: str, expected: list[str]
) -> None:
    found = store.search(RunQuery(TENANT, text=text, limit=100))
    assert ids(found.rows) == expected and found.total == len(expected)
    assert all_pages(store, RunQuery(TENANT, text=text, limit=3)) == expected


def test_filters_by_status_errors_and_time_range(store: ProjectionStore) -> None:
    open_runs = store.search(RunQuery(TENANT, status="received", limit=100))
    assert ids(open_runs.rows) == [f"run-{n:03d}" for n in range(40, 0, -4)]
    errors = store.search(RunQuery(TENANT, has_errors=True, limit=100))
    assert ids(errors.rows) == [f"run-{n:03d}" for n in range(39, 0, -3)]
    clean = store.search(RunQuery(TENANT, has_errors=False, limit=100))
    assert clean.total == 40 - errors.total
    ranged = store.search(
        RunQuery(TENANT, since="2026-11-29T10:10:00Z", until="2026-11-29T10:12:00Z", limit=100)
    )
    assert ids(ranged.rows) == ["run-012", "run-011", "run-010"]  # run-009's last is 10:09:30
    both = RunQuery(TENANT, text="gpt", has_errors=True, sort="started", descending=False, limit=2)
    assert all_pages(store, both) == [f"run-{n:03d}" for n in (3, 9, 15, 21, 27, 33, 39)]


def test_another_tenants_runs_are_never_counted(store: ProjectionStore) -> None:
    assert store.search(RunQuery("t2", limit=100)).total == 1
    assert ids(store.search(RunQuery("t2", text="run-", limit=100)).rows) == ["run-007"]


def test_every_page_query_reads_an_index(store: ProjectionStore) -> None:
    url = getattr(store, "url", None)
    assert url is not None
    for sort in SORT_KEYS:
        for status in (None, "received"):
            query = RunQuery(TENANT, sort=sort, status=status, after=("5", "run-005"), limit=50)
            if url.startswith("sqlite"):
                statement, params = search_statements(query)
                db = sqlite3.connect(path_of(url))
                plan = " ".join(
                    str(r) for r in db.execute(f"EXPLAIN QUERY PLAN {statement}", params)
                )
                db.close()
                assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, (sort, plan)
                assert "USE TEMP B-TREE FOR ORDER BY" not in plan or status, (sort, plan)
            else:
                import psycopg

                from runtrail.persistence.dialect import placeholders

                statement, params = search_statements(query, ' COLLATE "C"')
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("SET enable_seqscan = off")  # a tiny table: ask if one exists
                    plan = " ".join(
                        str(r[0])
                        for r in conn.execute(
                            f"EXPLAIN {placeholders(statement, 'postgresql')}", params
                        )
                    )
                assert "Index" in plan and "Seq Scan" not in plan, (sort, plan)
