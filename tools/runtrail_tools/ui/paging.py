"""A long run's timeline in pages: whole steps, about :data:`PAGE_EVENTS` events a page, so a
10,000-event run opens as fast as a short one; an event-type filter and a jump to the page
holding a given step.

A step is never split across pages (a step bigger than a page is a page of its own), so a
step's node cards always stand beside all of its events. Filtering keeps the steps that have
an event of a chosen type, with only those events; pages are counted after filtering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from runtrail.whole_numbers import signed_number, whole_number
from runtrail_tools.ui.timeline import Step, Timeline

#: Events a page lists before it closes at the end of a step.
PAGE_EVENTS = 300


@dataclass(frozen=True, slots=True)
class TimelineQuery:
    """The page, the event types kept (empty: all) and the step to jump to, from the URL."""

    page: int = 0
    types: tuple[str, ...] = ()
    step: int | None = None

    @classmethod
    def of(cls, params: Mapping[str, str], types: list[str]) -> TimelineQuery:
        """From query parameters (``page``, ``step``, ``type``: repeated in ``types``); a
        malformed number is ignored, as a missing one."""
        page = params.get("page", "")
        step = params.get("step", "").strip()
        return cls(
            max(0, (whole_number(page) or 0) - 1),
            tuple(t for t in dict.fromkeys(types) if t),
            signed_number(step),
        )

    def query(self, page: int | None = None) -> list[tuple[str, str]]:
        """The URL query of this view (``page`` 0-based, shown 1-based), without the jump."""
        pairs = [("type", t) for t in self.types]
        shown = self.page if page is None else page
        return pairs + ([("page", str(shown + 1))] if shown else [])


@dataclass(frozen=True)
class TimelinePage:
    steps: list[Step]
    #: 0-based page shown, and how many pages the (filtered) timeline has
    number: int
    count: int
    #: events on this page, and across every page of the (filtered) timeline
    shown_events: int
    matching_events: int
    #: every event type of the run, for the filter (sorted)
    types: list[str]
    #: the step jumped to when the URL asked for one that exists
    jumped_to: int | None = None

    @property
    def is_last(self) -> bool:
        return self.number >= self.count - 1


def _filtered(steps: list[Step], types: tuple[str, ...]) -> list[Step]:
    if not types:
        return steps
    kept = []
    for step in steps:
        links = [link for link in step.links if (link.event_type or "?") in types]
        if links:
            kept.append(replace(step, links=links))
    return kept


def _pages(steps: list[Step], page_events: int) -> list[list[Step]]:
    pages: list[list[Step]] = [[]]
    size = 0
    for step in steps:
        if size >= page_events:
            pages.append([])
            size = 0
        pages[-1].append(step)
        size += len(step.links)
    return pages


def paginate(
    timeline: Timeline, query: TimelineQuery, page_events: int = PAGE_EVENTS
) -> TimelinePage:
    types = sorted({link.event_type or "?" for step in timeline.steps for link in step.links})
    steps = _filtered(timeline.steps, query.types)
    pages = _pages(steps, page_events)
    number = min(query.page, len(pages) - 1)
    jumped = None
    if query.step is not None:
        for n, page in enumerate(pages):
            if any(step.step == query.step for step in page):
                number, jumped = n, query.step
                break
    shown = pages[number]
    return TimelinePage(
        shown,
        number,
        len(pages),
        sum(len(s.links) for s in shown),
        sum(len(s.links) for s in steps),
        types,
        jumped,
    )


def page_timeline(timeline: Timeline, page: TimelinePage) -> Timeline:
    """The page's part of the timeline (its steps, their nodes; the unplaced nodes on the last
    page), for what is drawn per page: the waterfall."""
    if page.count == 1 and len(page.steps) == len(timeline.steps):
        return timeline
    nodes = [n for step in page.steps for n in step.nodes]
    unplaced = timeline.unplaced if page.is_last else []
    return Timeline(page.steps, page.shown_events, nodes + unplaced, unplaced)
