"""What the timeline says of a resume, from what run.resumed recorded: the steps the resume
cache replayed are named as a range only when they are all the steps before the resume."""

from __future__ import annotations

import pytest

from runtrail_tools.ui.resumes import ResumeMark


def mark(at_step: int | None, cached_steps: int) -> ResumeMark:
    return ResumeMark(
        index=7,
        at_step=at_step,
        cached_steps=cached_steps,
        cache_hits=2 * cached_steps,
        process="worker-7 pid 42",
        previous_process=None,
        last_sequence=6,
        gap_ms=1500,
    )


@pytest.mark.parametrize(
    ("at_step", "cached", "said"),
    [
        (4, 3, "resumed by a new process at step 4; steps 1\N{EN DASH}3 from the resume cache"),
        (2, 1, "resumed by a new process at step 2; step 1 from the resume cache"),
        (5, 2, "resumed by a new process at step 5; 2 steps from the resume cache"),
        (3, 0, "resumed by a new process at step 3"),
        (None, 1, "resumed by a new process; 1 step from the resume cache"),
        (None, 0, "resumed by a new process"),
    ],
)
def test_the_resume_is_said_as_recorded(at_step: int | None, cached: int, said: str) -> None:
    assert mark(at_step, cached).text == said
