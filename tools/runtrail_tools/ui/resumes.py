"""Resumes and crash gaps on a run's timeline, read from the run's ``run.resumed`` events.

A resume is recorded by the process that took over (seed 000's recovery made durable): which
process, the first step it ran itself, how many steps before it the resume cache replayed. The
crash gap is the time the run lay without a process: from the earlier life's last recorded
event (``afterSequence``, else the link before the resume) to the resume. Both clocks are the
writers', as every time on the timeline is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtrail.audit.link import LinkSummary
from runtrail.audit.store import LinkStore
from runtrail.capture.times import epoch_ms_or_none

EVENT_TYPE = "run.resumed"


@dataclass(frozen=True, slots=True)
class ResumeMark:
    """One resume as the timeline marks it, placed at the link of its run.resumed."""

    index: int
    at_step: int | None
    cached_steps: int
    cache_hits: int
    #: ``host pid N`` of the process that took over ("" when it did not say)
    process: str
    previous_process: str | None
    #: the earlier life's last event (its sequence) and how long before the resume it was
    last_sequence: int | None
    gap_ms: int | None

    @property
    def text(self) -> str:
        """For example "resumed by a new process at step 4; steps 1-3 from the resume cache"
        (with an en dash)."""
        said = "resumed by a new process"
        if self.at_step is not None:
            said += f" at step {self.at_step}"
        if self.cached_steps and self.at_step is not None and self.cached_steps == self.at_step - 1:
            steps = "step 1" if self.at_step == 2 else f"steps 1\N{EN DASH}{self.at_step - 1}"
            return f"{said}; {steps} from the resume cache"
        if self.cached_steps:
            noun = "step" if self.cached_steps == 1 else "steps"
            return f"{said}; {self.cached_steps} {noun} from the resume cache"
        return said


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mark(links: list[LinkSummary], at: int, data: Mapping[str, Any]) -> ResumeMark:
    link = links[at]
    after = _int(data.get("afterSequence"))
    earlier = [x for x in links[:at] if after is not None and x.sequence == after]
    previous = earlier[-1] if earlier else (links[at - 1] if at > 0 else None)
    start, end = (
        epoch_ms_or_none(previous.occurred_at if previous else None),
        epoch_ms_or_none(link.occurred_at),
    )
    host, pid = data.get("host"), _int(data.get("pid"))
    process = " ".join(p for p in (str(host) if host else "", f"pid {pid}" if pid else "") if p)
    return ResumeMark(
        index=link.index,
        at_step=_int(data.get("atStep")),
        cached_steps=_int(data.get("cachedSteps")) or 0,
        cache_hits=_int(data.get("cacheHits")) or 0,
        process=process,
        previous_process=data.get("previousProcess") or None,
        last_sequence=previous.sequence if previous else None,
        gap_ms=max(0, end - start) if start is not None and end is not None else None,
    )


def resume_marks(
    audit: LinkStore, tenant: str, run_id: str, links: list[LinkSummary]
) -> dict[int, ResumeMark]:
    """The run's resumes by link index (each run.resumed's data read from its sealed link:
    a run has few, so a long run's page still reads summaries only, plus these)."""
    marks: dict[int, ResumeMark] = {}
    for at, link in enumerate(links):
        if link.event_type != EVENT_TYPE:
            continue
        sealed = audit.link_at(tenant, run_id, link.index)
        data = sealed.event.get("data") if sealed is not None else None
        marks[link.index] = _mark(links, at, data if isinstance(data, Mapping) else {})
    return marks
