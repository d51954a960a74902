"""The stores' explicit rewind path (``runtrail offsets set``): it moves an offset back or
forward past the "never moves back" fence, which stays in force for the service's own writes.
SQLite and PostgreSQL alike (projection and resume-cache stores)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.projection import ProjectionBatch, StoreConflict, open_projection_store
from runtrail.projection.store import ProjectionStore
from runtrail.resume.store import CacheStore, open_store, sqlite_url
from tests.test_projection_store import new_url, store, store_url  # noqa: F401  (fixtures)

TOPIC = "runtrail.events"


def test_projection_store_rewinds_past_its_fence(store: ProjectionStore) -> None:  # noqa: F811
    store.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 50, (TOPIC, 1): 7}))
    store.rewind_offsets(TOPIC, {0: 12})
    assert store.stored_offsets(TOPIC, [0, 1]) == {0: 12, 1: 7}
    store.rewind_offsets(TOPIC, {1: 70, 2: 3})  # forward, and a partition never written
    assert store.stored_offsets(TOPIC, [0, 1, 2]) == {0: 12, 1: 70, 2: 3}
    store.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 13}))  # the service goes on from 12
    with pytest.raises(StoreConflict):  # and its own writes are still fenced
        store.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 5}))
    assert store.stored_offsets(TOPIC, [0]) == {0: 13}


@pytest.fixture(params=["sqlite", "postgresql"])
def cache_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CacheStore]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "cache.db")
    else:
        url = request.getfixturevalue("postgres_url")
    opened = open_store(url, readers=1)
    try:
        yield opened
    finally:
        opened.close()


def test_resume_cache_store_rewinds(cache_store: CacheStore) -> None:
    cache_store.rewind_offsets(TOPIC, {0: 40, 1: 2})
    cache_store.rewind_offsets(TOPIC, {0: 10})
    assert cache_store.offsets(TOPIC) == {0: 10, 1: 2}
    assert cache_store.offsets("other") == {}


def test_reopened_projection_store_keeps_the_rewind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    first = open_projection_store(url)
    first.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 9}))
    first.rewind_offsets(TOPIC, {0: 4})
    first.close()
    again = open_projection_store(url)
    try:
        assert again.stored_offsets(TOPIC, [0]) == {0: 4}
    finally:
        again.close()
