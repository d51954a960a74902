"""The one tracking table, on SQLite and real PostgreSQL: positions share the rows'
transaction, never move back (refused, the transaction rolled back), and move only by an
explicit rewind."""

from __future__ import annotations

import pytest

from runtrail.persistence.migrations import migrate
from runtrail.persistence.tracking import TRACKING, PositionRegressed, Tracking
from tests.persistence_support import Backend, backend

__all__ = ["backend"]

TOPIC = "runtrail.events"


def _ready(backend: Backend) -> tuple[object, Tracking]:
    db = backend.open()
    migrate(db.transaction, db.dialect, [TRACKING])
    with db.transaction() as cur:
        cur.execute("CREATE TABLE rows_out (x INTEGER)")
    return db, Tracking("projection", db.dialect)


def test_positions_are_kept_with_the_rows_and_never_move_back(backend: Backend) -> None:
    db, tracking = _ready(backend)
    assert isinstance(db, type(backend.opened[0]))
    store = backend.opened[0]
    with store.transaction() as cur:
        cur.execute("INSERT INTO rows_out VALUES (1)")
        tracking.record(cur, {(TOPIC, 0): 5, (TOPIC, 1): 3})
    with store.transaction() as cur:
        assert tracking.read(cur, TOPIC) == {0: 5, 1: 3}
        assert tracking.read(cur, TOPIC, [1, 2]) == {1: 3}
        tracking.record(cur, {(TOPIC, 0): 5})  # the same position again: a no-op
    with pytest.raises(PositionRegressed) as caught, store.transaction() as cur:
        cur.execute("INSERT INTO rows_out VALUES (2)")
        tracking.record(cur, {(TOPIC, 1): 9, (TOPIC, 0): 4})
    assert (caught.value.stored, caught.value.offered) == (5, 4)
    assert "refusing to move it back" in str(caught.value)
    assert store.query("SELECT x FROM rows_out") == [(1,)]  # the whole transaction rolled back
    with store.transaction() as cur:
        assert tracking.read(cur, TOPIC) == {0: 5, 1: 3}


def test_a_rewind_is_explicit_and_then_the_fence_holds_from_there(backend: Backend) -> None:
    _, tracking = _ready(backend)
    store = backend.opened[0]
    with store.transaction() as cur:
        tracking.record(cur, {(TOPIC, 0): 50})
    with store.transaction() as cur:
        tracking.rewind(cur, TOPIC, {0: 10, 3: 7})
    with store.transaction() as cur:
        assert tracking.read(cur, TOPIC) == {0: 10, 3: 7}
        tracking.record(cur, {(TOPIC, 0): 11})
    with pytest.raises(PositionRegressed), store.transaction() as cur:
        tracking.record(cur, {(TOPIC, 0): 10})


def test_components_and_topics_keep_their_own_positions(backend: Backend) -> None:
    _, projection = _ready(backend)
    store = backend.opened[0]
    audit = Tracking("audit", store.dialect)
    with store.transaction() as cur:
        projection.record(cur, {(TOPIC, 0): 8})
        audit.record(cur, {(TOPIC, 0): 2, ("other", 1): 4})
    with store.transaction() as cur:
        assert projection.read(cur, TOPIC) == {0: 8}
        assert audit.read_all(cur) == {TOPIC: {0: 2}, "other": {1: 4}}


def test_a_second_handle_sees_the_fence_of_the_first(backend: Backend) -> None:
    _, tracking = _ready(backend)
    first, second = backend.opened[0], backend.open()
    with first.transaction() as cur:
        tracking.record(cur, {(TOPIC, 0): 20})
    with pytest.raises(PositionRegressed), second.transaction() as cur:
        tracking.record(cur, {(TOPIC, 0): 19})
