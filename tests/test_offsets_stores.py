"""The stores' explicit rewind path (``runtrail offsets set``): it moves an offset back or
forward past the "never moves back" fence, which stays in force for the service's own writes.
SQLite and PostgreSQL alike (projection and resume-cache stores)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.persistence import PROJECTIONS, RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection import ProjectionBatch, StoreConflict
from runtrail.projection.store import ProjectionStore
from runtrail.resume.store import CacheStore
from runtrail_tools.offsets.stores import StoreMissing, open_store_positions
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
    opened = open_store(RESUME_ENTRIES, url, readers=1)
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
    first = open_store(PROJECTIONS, url)
    first.apply_batch(ProjectionBatch(offsets={(TOPIC, 0): 9}))
    first.rewind_offsets(TOPIC, {0: 4})
    first.close()
    again = open_store(PROJECTIONS, url)
    try:
        assert again.stored_offsets(TOPIC, [0]) == {0: 4}
    finally:
        again.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def audit_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    from runtrail.persistence import AUDIT_LINKS, open_store

    url = f"sqlite://{tmp_path / 'audit.db'}"
    open_store(AUDIT_LINKS, url).close()  # the service made it
    return url


def test_audit_positions_move_sealed_and_published_together(audit_url: str, tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    positions = open_store_positions("audit", settings, {"store_url": audit_url})
    assert positions is not None
    try:
        positions.write(TOPIC, {0: 50, 1: 9})
        positions.write(TOPIC, {0: 3})  # back: allowed on this path
        assert positions.read(TOPIC, [0, 1, 2]) == {0: 3, 1: 9}
    finally:
        positions.close()
    from runtrail.persistence import AUDIT_LINKS, open_store
    from runtrail_services.audit.positions import published_name

    links = open_store(AUDIT_LINKS, audit_url)
    try:  # the service starts at the lower of the two: both moved
        assert links.stored_offsets(TOPIC, [0]) == {0: 3}
        assert links.stored_offsets(published_name(TOPIC), [0]) == {0: 3}
    finally:
        links.close()


@pytest.mark.parametrize("service", ["audit", "projector", "resume-cache"])
def test_a_mistyped_sqlite_store_is_an_error_not_a_new_store(service: str, tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "nope.db"
    url = f"sqlite:///{missing}" if service == "projector" else f"sqlite://{missing}"
    with pytest.raises(StoreMissing, match=f"no {service} store at {missing}"):
        open_store_positions(service, Settings(state_dir=tmp_path), {"store_url": url})
    assert not missing.exists()
    assert open_store_positions("noop", Settings(state_dir=tmp_path), {}) is None
