"""run.resumed in the projection: the run goes on as it stood, each resume is counted and the
latest kept, an afterSequence not behind the resume is refused, an ended run takes none; the
store's rows written one event at a time equal the rebuild's, and the runs page's "resumed"
filter finds exactly the resumed runs (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import (
    InvalidTransition,
    ProjectionBatch,
    ProjectionStore,
    RunProjection,
    apply_event,
    replay,
)
from runtrail.projection.names import utc_text
from runtrail.projection.store import RunQuery
from tests.projection_support import Run, listed_run
from tests.test_projection_store import new_url  # noqa: F401  (the two-database fixture)

OLD_LIFE = "2026-11-29T10:00:00Z"
NEW_LIFE = "2026-11-29T10:00:42Z"


def resumed_data(**changes: Any) -> dict[str, Any]:
    return {
        "host": "worker-7",
        "pid": 4242,
        "afterSequence": 4,
        "atStep": 3,
        "cachedSteps": 2,
        "cacheHits": 4,
        **changes,
    }


def crashed_run(run_id: str = "run-1") -> Run:
    """Two steps in a first process, then a new process takes over at step 3."""
    r = Run(run_id)
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"}, occurred_at=OLD_LIFE)
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, step=1, occurred_at=OLD_LIFE)
    r.add("MODEL_RESPONSE", {"message": "a", "raw": None}, step=1, occurred_at=OLD_LIFE)
    r.add("STEP_END", {"reason": "tool_use"}, step=1, occurred_at=OLD_LIFE)
    r.add("run.resumed", resumed_data(), step=3, occurred_at=NEW_LIFE)
    r.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, step=3, occurred_at=NEW_LIFE)
    return r


def test_a_resume_leaves_the_status_and_is_counted_with_its_details() -> None:
    r = crashed_run()
    before = replay(r.events[:4])
    state = replay(r.events)
    assert state.status == before.status
    assert state.resumes == 1
    last = state.last_resume
    assert last is not None
    assert (last.sequence, last.occurred_at, last.after_sequence) == (5, utc_text(NEW_LIFE), 4)
    assert (last.host, last.pid, last.at_step, last.cached_steps, last.cache_hits) == (
        "worker-7",
        4242,
        3,
        2,
        4,
    )
    r.add("run.resumed", resumed_data(afterSequence=6, host="worker-9", atStep=5))
    again = replay(r.events)
    assert again.resumes == 2 and again.last_resume is not None
    assert (again.last_resume.host, again.last_resume.at_step) == ("worker-9", 5)


def test_a_wait_resumed_elsewhere_stays_a_wait() -> None:
    r = Run()
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add("run.input_required", {"requestId": "ask-1"})
    r.add("run.resumed", resumed_data(afterSequence=2, cachedSteps=0, cacheHits=0))
    state = replay(r.events)
    assert (state.status, state.resumes) == ("awaiting_input", 1)


@pytest.mark.parametrize("after", [5, 9])
def test_an_earlier_life_that_is_not_behind_the_resume_is_refused(after: int) -> None:
    r = crashed_run()
    del r.events[4:]  # the first life only: the resume would be sequence 5
    state = replay(r.events)
    with pytest.raises(InvalidTransition, match="afterSequence"):
        apply_event(state, r.build("run.resumed", resumed_data(afterSequence=after)))


def test_an_ended_run_is_not_resumed() -> None:
    r = crashed_run()
    r.add("run.succeeded", {"resultRef": "blob://r"})
    with pytest.raises(InvalidTransition):
        apply_event(replay(r.events), r.build("run.resumed", resumed_data(afterSequence=7)))


@pytest.fixture
def store(new_url: Any) -> Iterator[ProjectionStore]:  # noqa: F811
    opened = open_store(PROJECTIONS, new_url("projection"))
    try:
        yield opened
    finally:
        opened.close()


def test_rows_written_event_by_event_equal_the_rebuild(store: ProjectionStore) -> None:
    r = crashed_run()
    state: RunProjection | None = None
    for event in r.events:  # online: one event, one write
        state = apply_event(state, event)
        store.apply_batch(ProjectionBatch(projections=[state]))
    row = store.get("t1", "run-1")
    assert row is not None and row.state is not None
    assert row.state == replay(r.events)
    assert row.state.resumes == 1


def test_the_runs_page_filters_resumed_runs(store: ProjectionStore) -> None:
    runs = [listed_run(n) for n in range(1, 6)] + [crashed_run("run-crashed")]
    store.apply_batch(ProjectionBatch(projections=[replay(r.events) for r in runs]))
    resumed = store.search(RunQuery("t1", resumed=True, limit=100))
    assert [row.run_id for row in resumed.rows] == ["run-crashed"] and resumed.total == 1
    others = store.search(RunQuery("t1", resumed=False, limit=100))
    assert others.total == 5 and "run-crashed" not in [row.run_id for row in others.rows]
